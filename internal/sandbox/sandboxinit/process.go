package sandboxinit

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/sandbox/launch"
)

// A session's background processes (launch.Spec.Process) run beside its
// calls. Unlike a call's, their streams are read and written by
// goroutines of their own, parked on the Go runtime's poller: the poll
// loop of calls does not wait for them, nor they for it. Their output
// goes out in frames of their own, so it never reaches a call's output or
// report; they end when they exit or with the session. They get no tool
// channel: what they asked, no call would answer.

// background is a running background process, or a connection to a
// port of the container's loopback (see connect).
type background struct {
	pid   int            // 0 for a connection
	stdin io.WriteCloser // the terminal's controlling side, with one
	// terminal says the process has one: the end of its input is a
	// Ctrl-D, as a person would type it, not a hang-up.
	terminal bool
	// conn is the connection's, whose end of input is a half-close.
	conn *net.TCPConn
	// copied is when output was last copied (Unix nanoseconds).
	copied atomic.Int64

	mu    sync.Mutex
	cond  *sync.Cond
	queue []byte // stdin still to write
	end   bool   // close stdin once queue is written
	gone  bool   // the process exited: drop what comes
}

// ctrlD is what a terminal's end of input is, in its canonical mode.
const ctrlD = 0x04

// outputGrace is how long after a process's exit its output may go
// quiet before its exit is reported: a child that kept the pipes open
// would otherwise hold the report back for ever. Output still flowing
// (megabytes the init has yet to copy on a busy host) is waited for: what
// comes after the report is dropped.
const outputGrace = 200 * time.Millisecond

// process handles a message about a background process.
func (s *session) process(spec launch.Spec) {
	if s.frames == nil {
		fmt.Fprintf(s.stderr, "sandboxd-init: background process %d: the session's output is not in frames\n", spec.Process)
		return
	}
	if len(spec.Argv) > 0 {
		if err := s.spawn(spec); err != nil {
			_ = s.frames.WriteProcessState(spec.Process, launch.ProcessState{Error: err.Error()})
		}
		return
	}
	if spec.Port != 0 {
		go s.connect(spec.Process, spec.Port)
		return
	}
	s.procsMu.Lock()
	b := s.procs[spec.Process]
	s.procsMu.Unlock()
	if b == nil {
		return // it has exited, and said so
	}
	if spec.Input != nil || spec.InputEnd {
		b.mu.Lock()
		if !b.gone {
			b.queue = append(b.queue, spec.Input...)
			b.end = b.end || spec.InputEnd
		}
		b.mu.Unlock()
		b.cond.Signal()
	}
	if spec.Signal != 0 && b.pid > 0 {
		_ = unix.Kill(-b.pid, unix.Signal(spec.Signal))
	}
	if spec.Close && b.conn != nil {
		b.conn.Close()
	}
	if ptm, ok := b.stdin.(*os.File); ok && spec.Resize != nil && b.terminal {
		_ = resize(ptm, *spec.Resize)
	}
}

// spawn starts a background process and the goroutines that serve it.
func (s *session) spawn(spec launch.Spec) error {
	if spec.UID == 0 || spec.GID == 0 {
		return errors.New("the program must not run as root")
	}
	s.procsMu.Lock()
	_, taken := s.procs[spec.Process]
	s.procsMu.Unlock()
	if taken {
		return fmt.Errorf("process %d is running", spec.Process)
	}
	var parents, children []*os.File
	defer func() {
		for _, f := range children {
			f.Close()
		}
	}()
	fail := func(err error) error {
		for _, f := range parents {
			f.Close()
		}
		return err
	}
	if spec.Terminal != nil {
		ptm, pts, err := openTerminal(*spec.Terminal)
		if err != nil {
			return fmt.Errorf("open a terminal: %v", err)
		}
		parents, children = []*os.File{ptm}, []*os.File{pts, pts, pts}
	} else {
		for i := 0; i < 3; i++ {
			r, w, err := os.Pipe()
			if err != nil {
				return fail(err)
			}
			if i == 0 {
				parents, children = append(parents, w), append(children, r)
			} else {
				parents, children = append(parents, r), append(children, w)
			}
		}
	}
	pid, exited, err := s.start(spec, spec.Argv, children, spec.Terminal != nil)
	if err != nil {
		return fail(err)
	}
	b := &background{pid: pid, stdin: parents[0], terminal: spec.Terminal != nil}
	b.cond = sync.NewCond(&b.mu)
	s.procsMu.Lock()
	s.procs[spec.Process] = b
	s.procsMu.Unlock()
	_ = s.frames.WriteProcessState(spec.Process, launch.ProcessState{Started: true})
	readers := make(chan struct{}, 2)
	if b.terminal {
		// Both ends are the terminal's: its output, all on stdout.
		readers <- struct{}{}
		go s.copyOutput(b, spec.Process, launch.FrameStdout, parents[0], readers)
	} else {
		go s.copyOutput(b, spec.Process, launch.FrameStdout, parents[1], readers)
		go s.copyOutput(b, spec.Process, launch.FrameStderr, parents[2], readers)
	}
	go b.writeStdin()
	go s.awaitExit(spec.Process, b, exited, readers)
	return nil
}

// copyOutput sends what the process writes on one stream until its end.
// A terminal's reads end with EIO once no process holds its other side.
// Its file is the stdin's too, which writeStdin closes.
func (s *session) copyOutput(b *background, n uint32, stream byte, r io.ReadCloser, done chan<- struct{}) {
	defer func() { done <- struct{}{} }()
	defer r.Close()
	buf := make([]byte, launch.MaxProcessChunk)
	for {
		k, err := r.Read(buf)
		if k > 0 {
			b.copied.Store(time.Now().UnixNano())
			if s.frames.WriteProcessOutput(n, stream, buf[:k]) != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// writeStdin writes what comes for the process's stdin, in order, and
// closes it when asked or when the process is gone.
func (b *background) writeStdin() {
	w := b.stdin
	for {
		b.mu.Lock()
		for len(b.queue) == 0 && !b.end && !b.gone {
			b.cond.Wait()
		}
		data, end, gone := b.queue, b.end, b.gone
		b.queue = nil
		if b.terminal {
			b.end = false // a Ctrl-D each time it is asked
		}
		b.mu.Unlock()
		if gone {
			w.Close()
			return
		}
		if end && b.terminal {
			data, end = append(data, ctrlD), false
		}
		if len(data) > 0 {
			if _, err := w.Write(data); err != nil {
				b.mu.Lock()
				b.gone, b.queue = true, nil
				b.mu.Unlock()
				w.Close()
				return
			}
		}
		if end {
			b.mu.Lock()
			left := len(b.queue)
			b.mu.Unlock()
			if left == 0 && b.conn != nil {
				// A half-close: the answer may still come.
				_ = b.conn.CloseWrite()
				return
			}
			if left == 0 {
				w.Close()
				return
			}
		}
	}
}

// awaitExit reports the process's exit once its output has come, or has
// been quiet for outputGrace since the exit, and forgets it.
func (s *session) awaitExit(n uint32, b *background, exited <-chan unix.WaitStatus, readers <-chan struct{}) {
	st := <-exited
	exitedAt := time.Now().UnixNano()
	tick := time.NewTicker(outputGrace / 4)
	defer tick.Stop()
	for left := 2; left > 0; {
		select {
		case <-readers:
			left--
		case <-tick.C:
			if time.Since(time.Unix(0, max(exitedAt, b.copied.Load()))) >= outputGrace {
				left = 0
			}
		}
	}
	s.procsMu.Lock()
	delete(s.procs, n)
	s.procsMu.Unlock()
	b.mu.Lock()
	b.gone, b.queue = true, nil
	b.mu.Unlock()
	b.cond.Signal()
	// A child of the process may hold its stdin open: a write blocked on
	// it ends here.
	b.stdin.Close()
	_ = s.frames.WriteProcessState(n, launch.ProcessState{Exited: true, Code: exitCode(st)})
}

// connectTimeout bounds a connection's connect.
const connectTimeout = 5 * time.Second

// connect relays a connection to port of the container's loopback, as
// background process n: sandboxd's inbound proxy reaches a session's
// server this way, through the init's own channel, on every OCI runtime
// and with no port published. Only the loopback: never an address the
// egress policy governs. It is reported ended once the server closed its
// side, or the connection failed or was closed.
func (s *session) connect(n uint32, port uint16) {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))), connectTimeout)
	if err != nil {
		_ = s.frames.WriteProcessState(n, launch.ProcessState{Error: fmt.Sprintf("connect to port %d: %v", port, unwrapNet(err))})
		return
	}
	conn := c.(*net.TCPConn)
	b := &background{stdin: conn, conn: conn}
	b.cond = sync.NewCond(&b.mu)
	s.procsMu.Lock()
	if _, taken := s.procs[n]; taken {
		s.procsMu.Unlock()
		conn.Close()
		_ = s.frames.WriteProcessState(n, launch.ProcessState{Error: fmt.Sprintf("process %d is running", n)})
		return
	}
	s.procs[n] = b
	s.procsMu.Unlock()
	_ = s.frames.WriteProcessState(n, launch.ProcessState{Started: true})
	done := make(chan struct{}, 1)
	go b.writeStdin()
	s.copyOutput(b, n, launch.FrameStdout, conn, done)
	s.procsMu.Lock()
	delete(s.procs, n)
	s.procsMu.Unlock()
	b.mu.Lock()
	b.gone, b.queue = true, nil
	b.mu.Unlock()
	b.cond.Signal()
	conn.Close()
	_ = s.frames.WriteProcessState(n, launch.ProcessState{Exited: true})
}

// unwrapNet is a dial's error without the address it repeats.
func unwrapNet(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return unwrap(op.Err)
	}
	return err
}
