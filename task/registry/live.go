package registry

import (
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/netpolicy"
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

	// network is an allow-listed run's log as it stands, until the run's
	// result holds it; changed numbers each event's last change (from
	// netSeq), so that an attacher reads only what changed.
	network []netpolicy.Event
	changed []uint64
	netSeq  uint64
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

// Network records event i of the run's network log as it now stands. The
// log numbers its events from 0 and tells each new one in order.
func (l *Live) Network(i int, e netpolicy.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case i == len(l.network):
		l.network = append(l.network, e)
		l.changed = append(l.changed, 0)
	case i < 0 || i > len(l.network):
		return
	default:
		l.network[i] = e
	}
	l.netSeq++
	l.changed[i] = l.netSeq
	l.signalLocked()
}

// NetworkSince returns the events that changed after seq (0: all), in the
// log's order, and the seq that reads on from there.
func (l *Live) NetworkSince(seq uint64) ([]run.NetworkEvent, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []run.NetworkEvent
	for i, c := range l.changed {
		if c > seq {
			out = append(out, run.NetworkEvent{Index: i, Event: l.network[i]})
		}
	}
	return out, l.netSeq
}

// forgetNetwork drops the log once the run's result holds it.
func (l *Live) forgetNetwork() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.network, l.changed = nil, nil
}
