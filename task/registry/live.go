package registry

import (
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/task/run"
)

// Live is what attachers of a run follow while it runs: its stream
// files, how much of each a caller may see (the head up to the stream's
// cap), and a signal for every change of the run: output, start, end.
type Live struct {
	mu      sync.Mutex
	files   [2]*os.File // by Stream-1; nil before the streams open and once closed
	visible [2]int64
	closed  bool
	news    chan struct{}
	waited  bool // someone holds news: the next change must close it
}

func newLive() *Live { return &Live{news: make(chan struct{})} }

// signal wakes whoever waits for the run's next change.
func (l *Live) signal() {
	l.mu.Lock()
	l.signalLocked()
	l.mu.Unlock()
}

func (l *Live) signalLocked() {
	if l.waited {
		close(l.news)
		l.news, l.waited = make(chan struct{}), false
	}
}

// Open makes the run's stream files followable.
func (l *Live) Open(stdout, stderr *os.File) {
	l.mu.Lock()
	l.files = [2]*os.File{stdout, stderr}
	l.mu.Unlock()
}

// Grew says a caller may now see visible bytes of s.
func (l *Live) Grew(s run.Stream, visible int64) {
	l.mu.Lock()
	if visible > l.visible[s-1] {
		l.visible[s-1] = visible
		l.signalLocked()
	}
	l.mu.Unlock()
}

// Close says the stream files are complete and about to go.
func (l *Live) Close() {
	l.mu.Lock()
	l.files, l.closed = [2]*os.File{}, true
	l.signalLocked()
	l.mu.Unlock()
}

// State is how much a caller may see of each stream, whether the files are
// gone, and a channel closed at the run's next change.
func (l *Live) State() (visible [2]int64, closed bool, news <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waited = true
	return l.visible, l.closed, l.news
}

// Dup opens a stream file of the live run for an attacher's own reads, or
// says it is gone.
func (l *Live) Dup(s run.Stream) (*os.File, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.files[s-1]
	if f == nil {
		return nil, false
	}
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	return os.NewFile(uintptr(fd), f.Name()), true
}
