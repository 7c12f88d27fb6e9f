package lifecycle

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/internal/sandbox/cgroup"
	"github.com/sandboxd/sandboxd/internal/sandbox/launch"
	"github.com/sandboxd/sandboxd/runtime"
)

var _ runtime.SessionHost = (*container)(nil)

// session is a container serving a session: its input stays open for the
// calls' messages, and its output goes to the running call's report. Every
// process of its calls has a tool channel (launch.Spec.Tools), whose
// requests go to the running call's Tools: the init writes the session's
// output in frames, on the control connection or on its stdout.
type session struct {
	c     *container
	input io.WriteCloser
	// inputMu orders the writes of calls, interrupts and answers.
	inputMu  sync.Mutex
	out      *switchWriter
	err      *switchWriter
	requests *switchWriter

	mu    sync.Mutex // one call at a time
	calls int
	// openMu orders the first message, which opens the session, before
	// every other; opened says it was sent.
	openMu sync.Mutex
	opened bool
	// broken is why nothing more can run in the container; brokenMu
	// guards it, set by a call or a background process.
	brokenMu sync.Mutex
	broken   error
	// procs are the background processes, by number (see process.go).
	procs processes
	// ended is closed when the init's frames end: the control connection
	// (input is then the connection), or stdout, or what is not a frame.
	ended chan struct{}
	// oom counts the OOM kills in the container's cgroups.
	oom cgroup.OOMCounter
}

// OpenSession makes the prepared container a session's.
func (c *container) OpenSession(ctx context.Context, r runtime.Resources) (runtime.Session, error) {
	if c.report != nil || c.session != nil {
		return nil, fmt.Errorf("open a session in %s: the container already has its task: %w", c.name, errdefs.ErrFailedPrecondition)
	}
	if r != c.resources {
		if err := c.update(ctx, r); err != nil {
			return nil, fmt.Errorf("update %s: %w", c.name, err)
		}
		c.resources = r
	}
	s, err := c.newSession()
	if err != nil {
		return nil, err
	}
	return s, nil
}

// newSession makes the container a session's: its output is taken apart
// as the session's frames from now on.
func (c *container) newSession() (*session, error) {
	s := &session{c: c, input: c.box.Input(), out: &switchWriter{}, err: &switchWriter{}, requests: &switchWriter{}, ended: make(chan struct{})}
	if c.cgroup != "" {
		// The program cannot make cgroups: the tree stays as it is now.
		oom, err := c.l.opts.Cgroups.OOMCounter(c.cgroup)
		if err != nil {
			return nil, fmt.Errorf("the cgroups of %s: %w", c.name, err)
		}
		s.oom = oom
	}
	c.session = s
	if c.control != "" {
		// The frames come on the control connection (acceptControl); the
		// init's stdout and stderr carry only what it says before.
		c.box.Attach(s.out, s.err)
	} else {
		c.box.Attach(&sessionFrames{s: s, d: launch.NewDeframer(s.out, s.err, s.requests).WithProcesses(&s.procs)}, s.err)
	}
	go func() {
		// The output's end is the end of every background process: the
		// container exited, or its init broke the frames.
		select {
		case <-s.ended:
		case <-c.box.OutputDone():
		}
		s.procs.endAll()
	}()
	return s, nil
}

// sessionFrames takes apart the frames of a session's output on the
// init's stdout; bytes that are not one end the session.
type sessionFrames struct {
	s    *session
	d    *launch.Deframer
	once sync.Once
}

func (f *sessionFrames) Write(p []byte) (int, error) {
	f.d.Write(p)
	if err := f.d.Err(); err != nil {
		f.once.Do(func() {
			f.s.c.l.log.Warn("session output", "container", f.s.c.name, "err", err)
			close(f.s.ended)
		})
	}
	return len(p), nil
}

// Call sends the call to the init and waits for its report.
func (s *session) Call(ctx context.Context, call runtime.Call) (runtime.CallExit, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.c
	if err := s.brokenErr(); err != nil {
		return runtime.CallExit{}, err
	}
	report, err := launch.NewReport(call.Stdout, call.Stderr)
	if err != nil {
		return runtime.CallExit{}, err
	}
	_, nproc := PidsLimits(c.runtime, c.resources.Pids)
	spec := launch.Spec{
		Argv: call.Argv, Env: call.Env, Dir: call.WorkingDir, UID: c.uid, GID: c.gid, Nproc: nproc,
		Report: report.Token(), StdinBytes: int64(len(call.Stdin)),
		TimeoutMillis: call.Timeout.Milliseconds(), Kernel: call.Kernel, Code: call.Code,
	}
	oomBefore := s.oomKills()
	s.out.set(report.Stdout())
	s.err.set(report.Stderr())
	defer s.out.set(nil)
	defer s.err.set(nil)
	if call.Tools != nil {
		defer s.serveTools(call.Tools)()
	}
	started := time.Now()
	if err := s.message(spec, call.Stdin); err != nil {
		return runtime.CallExit{}, err
	}
	s.calls++
	interrupt := ctx.Done()
	for {
		select {
		case <-report.Done():
			return s.exit(report, started, oomBefore)
		case err := <-c.box.Exited():
			// The program's doing as much as a kill of one process is: an
			// outcome of the call, and the end of the session.
			if err == nil {
				err = fmt.Errorf("the session's container %s exited", c.name)
			}
			s.fail(err)
			exit := runtime.CallExit{Code: 128 + int(syscall.SIGKILL), ContainerExited: true, StartedAt: started, FinishedAt: time.Now()}
			// The backend's word, as for a run: the container's own
			// cgroups may be gone with it (gVisor's sandbox dies whole).
			if st, err := c.status(context.WithoutCancel(ctx)); err == nil {
				exit.Code, exit.OOMKilled = st.Code, st.OOMKilled
			}
			exit.OOMKilled = exit.OOMKilled || s.oomKills() > oomBefore
			return exit, nil
		case <-s.ended:
			return runtime.CallExit{}, s.fail(fmt.Errorf("the output of %s ended, or was not in frames", c.name))
		case <-interrupt:
			interrupt = nil
			var m bytesWriter
			_ = launch.Write(&m, launch.Spec{Interrupt: true})
			if err := s.send(m); err != nil {
				return runtime.CallExit{}, s.fail(fmt.Errorf("interrupt a call in %s: %w", c.name, err))
			}
		}
	}
}

// message sends spec, and what follows it, to the init: as the session's
// first message, which opens it (launch.Spec.Session), when no other came
// before; a call and a background process may be the first.
func (s *session) message(spec launch.Spec, tail []byte) error {
	s.openMu.Lock()
	defer s.openMu.Unlock()
	c := s.c
	if err := s.brokenErr(); err != nil {
		return err
	}
	var ln *controlListener
	if !s.opened {
		spec.Session, spec.Tools = true, true
		if c.control != "" {
			var err error
			if ln, spec.Control, err = listenControl(c.control); err != nil {
				return s.fail(fmt.Errorf("the control socket of %s: %w", c.name, err))
			}
			defer ln.Close()
		}
	}
	var msg bytesWriter
	if err := launch.Write(&msg, spec); err != nil {
		return err
	}
	if err := s.send(append(msg, tail...)); err != nil {
		return s.fail(fmt.Errorf("send a message to %s: %w", c.name, err))
	}
	if s.opened {
		return nil
	}
	s.opened = true
	if ln != nil {
		if err := s.acceptControl(ln, spec.Control); err != nil {
			return s.fail(fmt.Errorf("the control connection of %s: %w", c.name, err))
		}
	}
	return nil
}

// send writes one message, and what follows it, to the init.
func (s *session) send(b []byte) error {
	s.inputMu.Lock()
	defer s.inputMu.Unlock()
	_, err := s.input.Write(b)
	return err
}

// serveTools serves the call's tool requests with t until the returned
// function ends them, at the call's end: the requests came before the
// report, and an answer after it would be another call's.
func (s *session) serveTools(t runtime.Tools) (end func()) {
	requests, toServe := io.Pipe()
	answers := &callAnswers{s: s}
	s.requests.set(toServe)
	go t.Serve(requests, answers)
	return func() {
		toServe.Close()
		s.requests.set(nil)
		answers.mu.Lock()
		answers.over = true
		answers.mu.Unlock()
	}
}

// callAnswers sends what a call's Tools answers as Answer messages, each
// Write whole, until the call is over.
type callAnswers struct {
	s    *session
	mu   sync.Mutex
	over bool
}

func (a *callAnswers) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.over {
		return 0, errCallOver
	}
	var m bytesWriter
	if err := launch.Write(&m, launch.Spec{Answer: p}); err != nil {
		return 0, err
	}
	if err := a.s.send(m); err != nil {
		return 0, err
	}
	return len(p), nil
}

var errCallOver = errors.New("the call is over")

// controlAcceptTimeout bounds the wait for the init's control connection,
// which it opens before it runs the first call.
const controlAcceptTimeout = 10 * time.Second

// listenControl listens on the socket in the host's control folder dir,
// and returns a token for the init to send.
func listenControl(dir string) (*controlListener, string, error) {
	// The folder's path can be longer than a socket address allows
	// (108 bytes); through a descriptor of it, it is not.
	d, err := os.Open(dir)
	if err != nil {
		return nil, "", err
	}
	defer d.Close()
	addr := fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), path.Base(launch.ControlSocket))
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
	if err != nil {
		return nil, "", err
	}
	// Its address names a descriptor closed by now: Close unlinks the
	// socket by its own path.
	ln.SetUnlinkOnClose(false)
	cl := &controlListener{ln, filepath.Join(dir, path.Base(launch.ControlSocket))}
	token := make([]byte, 16)
	if _, err := rand.Read(token); err != nil {
		cl.Close()
		return nil, "", err
	}
	return cl, hex.EncodeToString(token), nil
}

// controlListener listens for the one control connection; Close unlinks
// its socket, so that nothing else can connect.
type controlListener struct {
	*net.UnixListener
	socket string
}

func (l *controlListener) Close() error {
	err := l.UnixListener.Close()
	if rmErr := os.Remove(l.socket); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) {
		err = errors.Join(err, rmErr)
	}
	return err
}

// acceptControl takes the init's connection, checks its token, and starts
// copying the output frames it carries to the running call's writers.
func (s *session) acceptControl(ln *controlListener, token string) error {
	deadline := time.Now().Add(controlAcceptTimeout)
	_ = ln.SetDeadline(deadline)
	type accepted struct {
		conn net.Conn
		err  error
	}
	got := make(chan accepted, 1)
	go func() {
		conn, err := ln.Accept()
		got <- accepted{conn, err}
	}()
	var a accepted
	select {
	case a = <-got:
	case err := <-s.c.box.Exited():
		ln.Close()
		if a = <-got; a.conn != nil {
			a.conn.Close()
		}
		return fmt.Errorf("the container exited before its init connected: %v", err)
	}
	ln.Close()
	if a.err != nil {
		return a.err
	}
	conn := a.conn
	_ = conn.SetReadDeadline(deadline)
	r := bufio.NewReaderSize(conn, launch.MaxFrameBytes+8)
	line, err := r.ReadSlice('\n')
	if err == nil && subtle.ConstantTimeCompare(line, []byte(token+"\n")) != 1 {
		err = errors.New("the connection did not carry the session's token")
	}
	if err != nil {
		conn.Close()
		return err
	}
	_ = conn.SetReadDeadline(time.Time{})
	s.inputMu.Lock()
	s.input = conn
	s.inputMu.Unlock()
	go func() {
		defer close(s.ended)
		defer conn.Close()
		if err := launch.NewDeframer(s.out, s.err, s.requests).WithProcesses(&s.procs).CopyFrom(r); err != nil && !errors.Is(err, net.ErrClosed) {
			s.c.l.log.Warn("session control connection", "container", s.c.name, "err", err)
		}
	}()
	return nil
}

// exit is the call's end as its report tells it.
func (s *session) exit(report *launch.Report, started time.Time, oomBefore int64) (runtime.CallExit, error) {
	code, at := report.Exit()
	exit := runtime.CallExit{Code: code, StartedAt: started, FinishedAt: at}
	var end launch.CallEnd
	if data := report.Data(); data != nil {
		if err := json.Unmarshal(data, &end); err != nil {
			return runtime.CallExit{}, s.fail(fmt.Errorf("the init's report of a call in %s: %w", s.c.name, err))
		}
	}
	exit.TimedOut, exit.Interrupted, exit.KernelDied, exit.Reply = end.TimedOut, end.Interrupted, end.KernelDied, end.Reply
	exit.OOMKilled = s.oomKills() > oomBefore
	if s.c.cgroup != "" {
		if peak, err := s.c.l.opts.Cgroups.PeakMemory(s.c.cgroup); err == nil {
			exit.PeakMemoryBytes = peak
		}
	}
	return exit, nil
}

// fail marks the session broken: its container is of no further use,
// and its background processes are over.
func (s *session) fail(err error) error {
	s.brokenMu.Lock()
	if s.broken == nil {
		s.broken = errdefs.ErrUnavailable.WithMessage(err.Error())
	}
	err = s.broken
	s.brokenMu.Unlock()
	s.procs.endAll()
	return err
}

// brokenErr is why the session is broken, or nil.
func (s *session) brokenErr() error {
	s.brokenMu.Lock()
	defer s.brokenMu.Unlock()
	return s.broken
}

// oomKills counts the OOM kills in the container's cgroups, or 0.
func (s *session) oomKills() int64 {
	n, _ := s.oom.Count()
	return n
}

// switchWriter passes what the container writes to the running call's
// writer; between calls nothing should come, and what does is dropped.
type switchWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *switchWriter) set(w io.Writer) {
	s.mu.Lock()
	s.w = w
	s.mu.Unlock()
}

func (s *switchWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		return len(p), nil
	}
	if _, err := s.w.Write(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

type bytesWriter []byte

func (b *bytesWriter) Write(p []byte) (int, error) {
	*b = append(*b, p...)
	return len(p), nil
}
