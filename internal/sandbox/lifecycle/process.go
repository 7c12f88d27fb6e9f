package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/internal/sandbox/launch"
	"github.com/sandboxd/sandboxd/runtime"
)

var _ runtime.ProcessHost = (*session)(nil)

// Spawn starts a background process by a message to the session's init,
// and waits for the init to say it started.
func (s *session) Spawn(ctx context.Context, p runtime.ProcessSpec) (runtime.Process, error) {
	c := s.c
	proc := s.procs.add(s, p)
	_, nproc := PidsLimits(c.runtime, c.resources.Pids)
	spec := launch.Spec{Process: proc.n, Argv: p.Argv, Env: p.Env, Dir: p.WorkingDir, UID: c.uid, GID: c.gid, Nproc: nproc}
	if t := p.Terminal; t != nil {
		spec.Terminal = &launch.WindowSize{Rows: t.Rows, Cols: t.Cols}
	}
	if err := s.message(spec, nil); err != nil {
		s.procs.end(proc.n, runtime.ProcessExit{Code: 128 + int(syscall.SIGKILL), SessionEnded: true})
		return nil, err
	}
	select {
	case <-proc.started:
	case <-proc.done:
	case <-ctx.Done():
		// It may start yet: it is the session's, and ends with it.
		return nil, fmt.Errorf("start a background process in %s: %w", c.name, ctx.Err())
	}
	if proc.startErr != "" {
		msg := proc.startErr
		if strings.HasSuffix(msg, "command not found") {
			return nil, errdefs.ErrInvalidArgument.WithMessage(msg)
		}
		return nil, fmt.Errorf("start a background process in %s: %s", c.name, msg)
	}
	if proc.exit.SessionEnded {
		return nil, errdefs.ErrUnavailable.WithMessage(fmt.Sprintf("the session's container %s ended", c.name))
	}
	return proc, nil
}

// processes are a session's background processes; the init knows them by
// the numbers sandboxd gives them, never reused in a session. It is the
// launch.ProcessSink of the session's frames.
type processes struct {
	mu      sync.Mutex
	last    uint32
	running map[uint32]*process
	ended   bool // the session is over: no process will report
	// ending says the session's container is being removed: a process
	// the init reports ended from then on was killed with it, however
	// the init or the OCI runtime got to it first.
	ending bool
	// held, while a checkpoint waits for it, is closed at the init's word
	// that it holds its output (launch.Spec.Quiesce); saved says the
	// session was checkpointed: the end of its container is not its
	// processes' (runtime.ProcessExit.Saved).
	held  chan struct{}
	saved bool
	// resumed, while a restore waits for it, is closed at the init's
	// word that it writes again, the restore complete.
	resumed chan struct{}
}

// endingNow says the session's container is being removed.
func (ps *processes) endingNow() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.ending = true
}

var _ launch.ProcessSink = (*processes)(nil)

// process is a background process as the host sees it.
type process struct {
	s       *session
	n       uint32
	spec    runtime.ProcessSpec
	started chan struct{} // closed at the init's word that it started
	done    chan struct{}
	// startErr and exit are set before started or done is closed.
	startErr string
	exit     runtime.ProcessExit
}

func (ps *processes) add(s *session, spec runtime.ProcessSpec) *process {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.running == nil {
		ps.running = map[uint32]*process{}
	}
	ps.last++
	p := &process{s: s, n: ps.last, spec: spec, started: make(chan struct{}), done: make(chan struct{})}
	if ps.ended {
		p.exit = runtime.ProcessExit{Code: 128 + int(syscall.SIGKILL), SessionEnded: true, FinishedAt: time.Now()}
		close(p.done)
		return p
	}
	ps.running[p.n] = p
	return p
}

// ProcessOutput passes a frame of output on, while the sink's lock is
// held: output and the end are in the order the init wrote them.
func (ps *processes) ProcessOutput(n uint32, stream byte, data []byte) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p := ps.running[n]
	if p == nil {
		return
	}
	w := p.spec.Stdout
	if stream == launch.FrameStderr {
		w = p.spec.Stderr
	}
	if w != nil {
		_, _ = w.Write(data)
	}
}

// ProcessState takes what the init says became of a process.
func (ps *processes) ProcessState(n uint32, st launch.ProcessState) {
	ps.mu.Lock()
	if n == 0 && st.Held && ps.held != nil {
		close(ps.held)
		ps.held = nil
	}
	if n == 0 && st.Resumed && ps.resumed != nil {
		close(ps.resumed)
		ps.resumed = nil
	}
	p := ps.running[n]
	if p != nil && st.Started {
		select {
		case <-p.started:
		default:
			close(p.started)
		}
	}
	ps.mu.Unlock()
	switch {
	case p == nil || st.Started:
	case st.Error != "":
		p.startErr = st.Error
		ps.end(n, runtime.ProcessExit{Code: 127})
	case st.Exited:
		ps.mu.Lock()
		ending := ps.ending
		ps.mu.Unlock()
		ps.end(n, runtime.ProcessExit{Code: st.Code, SessionEnded: ending})
	}
}

// end ends process n with exit, once.
func (ps *processes) end(n uint32, exit runtime.ProcessExit) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p := ps.running[n]
	if p == nil {
		return
	}
	delete(ps.running, n)
	exit.FinishedAt = time.Now()
	p.exit = exit
	close(p.done)
}

// endAll ends every process with the session, and every one to come.
func (ps *processes) endAll() {
	ps.mu.Lock()
	ps.ended = true
	saved := ps.saved
	var ns []uint32
	for n := range ps.running {
		ns = append(ns, n)
	}
	ps.mu.Unlock()
	for _, n := range ns {
		ps.end(n, runtime.ProcessExit{Code: 128 + int(syscall.SIGKILL), SessionEnded: true, Saved: saved})
	}
}

func (p *process) WriteStdin(b []byte) error {
	for len(b) > 0 {
		// A message is bounded; its JSON takes a third more than the bytes.
		chunk := b[:min(len(b), launch.MaxBytes/2)]
		if err := p.s.message(launch.Spec{Process: p.n, Input: chunk}, nil); err != nil {
			return err
		}
		b = b[len(chunk):]
	}
	return nil
}

func (p *process) CloseStdin() error {
	return p.s.message(launch.Spec{Process: p.n, InputEnd: true}, nil)
}

func (p *process) Signal(n int) error {
	if n <= 0 || n > 64 {
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("signal %d is not a signal", n))
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	return p.s.message(launch.Spec{Process: p.n, Signal: n}, nil)
}

func (p *process) Resize(size runtime.WindowSize) error {
	if p.spec.Terminal == nil {
		return errdefs.ErrFailedPrecondition.WithMessage("the process has no terminal")
	}
	return p.s.message(launch.Spec{Process: p.n, Resize: &launch.WindowSize{Rows: size.Rows, Cols: size.Cols}}, nil)
}

func (p *process) Done() <-chan struct{} { return p.done }

func (p *process) Exit() runtime.ProcessExit {
	<-p.done
	return p.exit
}
