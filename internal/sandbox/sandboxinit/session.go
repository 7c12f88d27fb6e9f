package sandboxinit

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/sandbox/launch"
)

// A session's init runs one call after another, each from its launch
// message, and keeps what the calls started: background processes, and
// the kernel of kernel calls. Each call's output goes through pipes the
// init reads, so that nothing a call left running writes into the next
// call's output or its report; the init reads them, and waits for the
// call's end, in one poll loop.
//
// A session whose first message asks for tools (launch.Spec.Tools) gives
// each call's process, and the kernel, a tool channel of its own at
// launch.ToolsFD: a command's lives as long as the call, the kernel's as
// long as the kernel, so that no answer meant for one process reaches
// another. The same poll loop relays the running call's channel: its
// requests go out as frames, among the output frames, and the answers
// that come as messages go in.

// session is the state of a session's init.
type session struct {
	dir int // the working directory, to flush
	// in carries the messages after the first; stdout and stderr, the
	// calls' output and reports: the init's stdin, stdout and stderr, or
	// the control connection (see launch.ControlSocket).
	in             io.Reader
	stdout, stderr io.Writer
	events         *os.File
	notify         *os.File
	reaper         *reaper
	calls          chan call
	kernel         *kernel
	// startMu serializes starts, which set the init's environment and
	// rlimits for the child: calls and background processes start from
	// two goroutines.
	startMu sync.Mutex
	started bool // the first program ran: capabilities were dropped

	// frames writes the frames of background processes (nil when the
	// output is not in frames); procs are those running, by number.
	frames  *launch.FrameWriter
	procsMu sync.Mutex
	procs   map[uint32]*background

	// tools says each process gets a tool channel, whose requests go to
	// requests; answers holds the answers that came since the running
	// call's loop last took them.
	tools     bool
	requests  io.Writer
	answersMu sync.Mutex
	answers   []byte
}

// call is one launch message and its stdin.
type call struct {
	spec  launch.Spec
	stdin []byte
}

// Events on the session's event pipe, which wakes the poll loop.
const (
	eventExit      = 'x' // a watched process was reaped
	eventInterrupt = 'i' // sandboxd asked to interrupt the call
	eventAnswer    = 'a' // answers came for the call's tool channel
)

func serveSession(first launch.Spec, dir int, signals <-chan os.Signal) int {
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandboxd-init: %v\n", err)
		return exitCannotRun
	}
	s := &session{dir: dir, in: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, events: r, notify: w, calls: make(chan call), procs: map[uint32]*background{}}
	// The output goes to stdout and stderr as it is, or in frames on the
	// control connection; with tools, in frames on one or the other, the
	// requests among them.
	out := io.Writer(os.Stdout)
	if first.Control != "" {
		conn, err := dialControl(first.Control)
		if err != nil {
			fmt.Fprintf(os.Stderr, "sandboxd-init: control connection: %v\n", err)
			return exitCannotRun
		}
		s.in, out = bufio.NewReader(conn), conn
		s.stdout, s.stderr = launch.NewFrameWriters(conn)
	}
	if first.Tools {
		s.tools = true
		s.stdout, s.stderr, s.requests = launch.NewRelayWriters(out)
	}
	s.frames, _ = s.stdout.(*launch.FrameWriter)
	s.reaper = &reaper{waiting: map[int]chan unix.WaitStatus{}, notify: w}
	go s.readCalls(first)
	go s.handleSignals(signals)
	for c := range s.calls {
		if c.spec.UID == 0 || c.spec.GID == 0 {
			fmt.Fprintln(s.stderr, "sandboxd-init: the program must not run as root")
			return exitUsage
		}
		s.serve(c)
	}
	// The input ended: the session is over.
	endEverything()
	return 0
}

// readCalls reads launch messages and their stdin, and passes the calls on;
// an interrupt, and answers, go to the running call at once. The end of the input, or
// a bad message, ends the session. The first message and its stdin came
// on the init's stdin, the rest come on s.in.
func (s *session) readCalls(first launch.Spec) {
	defer close(s.calls)
	spec, in := first, io.Reader(os.Stdin)
	held := false
	for {
		switch {
		case spec.Interrupt:
			s.notify.Write([]byte{eventInterrupt})
		case spec.Process != 0:
			s.process(spec)
		case spec.Quiesce && s.frames != nil && !held:
			// Held until Resume, which comes next: no frame is written
			// meanwhile.
			_ = s.frames.Hold()
			held = true
		case spec.Resume && held:
			s.frames.Release()
			held = false
			_ = s.frames.WriteProcessState(0, launch.ProcessState{Resumed: true})
		case spec.Quiesce || spec.Resume:
		case spec.Answer != nil:
			s.answersMu.Lock()
			s.answers = append(s.answers, spec.Answer...)
			s.answersMu.Unlock()
			s.notify.Write([]byte{eventAnswer})
		default:
			stdin := make([]byte, spec.StdinBytes)
			if _, err := io.ReadFull(in, stdin); err != nil {
				fmt.Fprintf(s.stderr, "sandboxd-init: stdin of a call: %v\n", err)
				return
			}
			s.calls <- call{spec: spec, stdin: stdin}
		}
		in = s.in
		var err error
		if spec, err = launch.Read(in); err != nil {
			if !errors.Is(err, io.EOF) {
				fmt.Fprintf(s.stderr, "sandboxd-init: %v\n", err)
			}
			return
		}
	}
}

// handleSignals reaps on SIGCHLD and passes the forwarded signals on to
// the running call's process group.
func (s *session) handleSignals(signals <-chan os.Signal) {
	for sig := range signals {
		if sig == syscall.SIGCHLD {
			s.reaper.reap()
		}
	}
}

// serve runs one call and writes its report.
func (s *session) serve(c call) {
	var end launch.CallEnd
	code := exitCannotRun
	if c.spec.Kernel {
		code, end = s.runKernel(c)
	} else {
		code, end = s.runCommand(c)
	}
	_ = unix.Syncfs(s.dir)
	data, _ := json.Marshal(end)
	if len(data) > launch.MaxDataBytes {
		end.Reply = nil
		data, _ = json.Marshal(end)
	}
	line := launch.ReportLine(c.spec.Report, code)
	// One write: each is a message through the backend's attach.
	s.stdout.Write(append(launch.DataLine(c.spec.Report, data), line...))
	s.stderr.Write(line)
}

// start starts argv of spec under the call's user, with files as its
// stdin, stdout, stderr and beyond, in a session of its own (whose
// controlling terminal is its stdin, with ctty), and watches its exit.
func (s *session) start(spec launch.Spec, argv []string, files []*os.File, ctty bool) (int, <-chan unix.WaitStatus, error) {
	s.startMu.Lock()
	defer s.startMu.Unlock()
	if err := setEnv(spec.Env); err != nil {
		return 0, nil, err
	}
	path, err := lookPath(argv[0])
	if err != nil {
		return 0, nil, fmt.Errorf("%s: command not found", argv[0])
	}
	if spec.Nproc > 0 {
		// Inherited by the call's processes, whose user it counts; the
		// init is root's, which it does not bound. Under gVisor it is the
		// guest's pids limit (lifecycle.PidsLimits): without it a bomb in
		// a session grew until the sandbox died.
		lim := unix.Rlimit{Cur: uint64(spec.Nproc), Max: uint64(spec.Nproc)}
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, &lim); err != nil {
			return 0, nil, fmt.Errorf("set RLIMIT_NPROC: %v", err)
		}
	}
	pid, exited, err := s.reaper.start(path, argv, &os.ProcAttr{
		Dir: spec.Dir, Env: spec.Env, Files: files,
		Sys: &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: spec.UID, Gid: spec.GID, Groups: []uint32{}},
			Setsid:     true,
			Setctty:    ctty, // Ctty 0: the child's stdin
		},
	})
	if err != nil {
		return 0, nil, fmt.Errorf("cannot run %s: %v", argv[0], unwrap(err))
	}
	if !s.started {
		// Starting calls needs the user and group changes; nothing else.
		s.started = true
		if err := keepOnly(unix.CAP_KILL, unix.CAP_SETUID, unix.CAP_SETGID); err != nil {
			_ = unix.Kill(pid, unix.SIGKILL)
			return 0, nil, fmt.Errorf("dropping capabilities: %v", err)
		}
	}
	return pid, exited, nil
}

// runCommand runs a call's program to its end, or until it is cut short,
// which kills its process group.
func (s *session) runCommand(c call) (int, launch.CallEnd) {
	var end launch.CallEnd
	stdin, out, errOut, closeAll, err := callPipes(s.stdout, s.stderr)
	if err != nil {
		fmt.Fprintf(s.stderr, "sandboxd-init: %v\n", err)
		return exitCannotRun, end
	}
	defer closeAll()
	files := []*os.File{stdin.child, out.child, errOut.child}
	var ch *pipe
	if s.tools {
		if ch, err = s.toolChannel(); err != nil {
			fmt.Fprintf(s.stderr, "sandboxd-init: tool channel: %v\n", err)
			return exitCannotRun, end
		}
		defer ch.closeParent()
		files = append(files, ch.child)
	}
	pid, exited, err := s.start(c.spec, c.spec.Argv, files, false)
	stdin.closeChild()
	out.closeChild()
	errOut.closeChild()
	if ch != nil {
		ch.closeChild()
	}
	if err != nil {
		fmt.Fprintf(s.stderr, "sandboxd-init: %v\n", err)
		return exitNotFound, end
	}
	if err := stdin.feed(c.stdin, true); err != nil {
		fmt.Fprintf(s.stderr, "sandboxd-init: %v\n", err)
	}
	var status unix.WaitStatus
	done := false
	cut := func() { _ = unix.Kill(-pid, unix.SIGKILL) }
	s.pump(c.spec, stdin, []*pipe{out, errOut}, ch, func() bool {
		select {
		case status = <-exited:
			done = true
		default:
		}
		return done
	}, func(interrupted bool) {
		end.TimedOut, end.Interrupted = !interrupted, interrupted
		cut()
	}, nil)
	return exitCode(status), end
}

// pump writes what in has pending, and copies the call's pipes to the
// init's stdout and stderr, until ended says the call is over, then what
// the pipes still hold; it relays the call's tool channel ch, when it has
// one. At the call's timeout, or when sandboxd interrupts it, it calls cut
// once; later, if set, grace past the cut.
//
// The init does all of it in this one goroutine, never waiting on another:
// in a container of one CPU it runs with GOMAXPROCS 1, and a goroutine
// made runnable while this one sits in poll(2) waits for the Go runtime's
// monitor to take the processor back, up to milliseconds later.
func (s *session) pump(spec launch.Spec, in *pipe, pipes []*pipe, ch *pipe, ended func() bool, cut func(interrupted bool), later func()) {
	deadline := time.Time{}
	if spec.TimeoutMillis > 0 {
		deadline = time.Now().Add(time.Duration(spec.TimeoutMillis) * time.Millisecond)
	}
	var graceAt time.Time
	cutDone := false
	if ch != nil {
		// Answers that came after the previous call ended were for calls
		// its end cut off.
		s.takeAnswers()
		pipes = append(pipes, ch)
	}
	fds := make([]unix.PollFd, 0, len(pipes)+2)
	buf := make([]byte, 64<<10)
	for !ended() {
		fds = fds[:0]
		fds = append(fds, unix.PollFd{Fd: int32(s.events.Fd()), Events: unix.POLLIN})
		for _, w := range []*pipe{in, ch} {
			if w.writing() {
				fds = append(fds, unix.PollFd{Fd: int32(w.fd), Events: unix.POLLOUT})
			}
		}
		for _, p := range pipes {
			if p.parent != nil {
				fds = append(fds, unix.PollFd{Fd: int32(p.fd), Events: unix.POLLIN})
			}
		}
		// A lost SIGCHLD (the signal queue can fill) delays an exit by
		// this much at worst.
		wait := 250
		now := time.Now()
		switch {
		case !cutDone && !deadline.IsZero():
			wait = int(min(250, max(0, deadline.Sub(now).Milliseconds()+1)))
		case cutDone && later != nil && !graceAt.IsZero():
			wait = int(min(250, max(0, graceAt.Sub(now).Milliseconds()+1)))
		}
		if _, err := unix.Poll(fds, wait); err != nil && !errors.Is(err, unix.EINTR) {
			fmt.Fprintf(s.stderr, "sandboxd-init: poll: %v\n", err)
			return
		}
		if fds[0].Revents&unix.POLLIN != 0 {
			var ev [16]byte
			n, _ := s.events.Read(ev[:])
			for _, e := range ev[:n] {
				if e == eventInterrupt && !cutDone {
					cutDone = true
					cut(true)
					graceAt = time.Now().Add(launch.InterruptGrace)
				}
				if e == eventAnswer && ch != nil && ch.parent != nil {
					ch.pending = append(ch.pending, s.takeAnswers()...)
				}
			}
		}
		in.writeAvailable()
		ch.writeAvailable()
		for _, p := range pipes {
			p.copyAvailable(buf)
		}
		s.reaper.reap()
		now = time.Now()
		if !cutDone && !deadline.IsZero() && !now.Before(deadline) {
			cutDone = true
			cut(false)
			graceAt = now.Add(launch.InterruptGrace)
		} else if cutDone && later != nil && !graceAt.IsZero() && !now.Before(graceAt) {
			later()
			later = nil
		}
	}
	for _, p := range pipes {
		p.copyAvailable(buf)
	}
}

// toolChannel makes a process's tool channel: a socket pair whose child
// end is the process's, and whose other end the init reads requests from,
// to s.requests, and writes answers to, neither waiting.
func (s *session) toolChannel() (*pipe, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ch, err := reading(os.NewFile(uintptr(fds[1]), "tools"), s.requests)
	if err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, err
	}
	ch.child = os.NewFile(uintptr(fds[0]), "tools")
	return ch, nil
}

// takeAnswers takes the answers that came since it last did.
func (s *session) takeAnswers() []byte {
	s.answersMu.Lock()
	defer s.answersMu.Unlock()
	a := s.answers
	s.answers = nil
	return a
}

// dialControl opens the control connection and sends its token.
func dialControl(token string) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	conn := os.NewFile(uintptr(fd), launch.ControlSocket)
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: launch.ControlSocket}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("connect to %s: %w", launch.ControlSocket, err)
	}
	if _, err := conn.Write([]byte(token + "\n")); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// exitCode is the shell's code for a wait status.
func exitCode(st unix.WaitStatus) int {
	if st.Signaled() {
		return 128 + int(st.Signal())
	}
	return st.ExitStatus()
}

// setEnv makes env the init's environment, so that the program's PATH
// finds it.
func setEnv(env []string) error {
	os.Clearenv()
	for _, kv := range env {
		for i := 0; i < len(kv); i++ {
			if kv[i] == '=' {
				if err := os.Setenv(kv[:i], kv[i+1:]); err != nil {
					return err
				}
				break
			}
		}
	}
	return nil
}

// pipe is one of a call's streams: the end its program holds (child) and
// the init's (parent).
type pipe struct {
	child, parent *os.File
	fd            int       // parent's, non-blocking when the init reads or writes it
	to            io.Writer // where the init copies what it reads
	// pending is what the init has yet to write; closeAfter closes the
	// pipe once it is written.
	pending    []byte
	closeAfter bool
}

// reading makes the init's end of r a pipe it reads without waiting.
func reading(r *os.File, to io.Writer) (*pipe, error) {
	fd := int(r.Fd()) // Fd makes the file blocking: first, then non-blocking
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, err
	}
	return &pipe{parent: r, fd: fd, to: to}, nil
}

func (p *pipe) closeParent() {
	if p.parent != nil {
		p.parent.Close()
		p.parent = nil
	}
}

func (p *pipe) closeChild() {
	if p.child != nil {
		p.child.Close()
		p.child = nil
	}
}

// copyAvailable copies what the pipe holds now, without waiting for more;
// at its end the pipe is closed.
func (p *pipe) copyAvailable(buf []byte) {
	for p.parent != nil {
		n, err := unix.Read(p.fd, buf)
		if n > 0 {
			p.to.Write(buf[:n])
			continue
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err == nil || !errors.Is(err, unix.EAGAIN) {
			p.parent.Close() // end of the stream
			p.parent = nil
		}
		return
	}
}

// feed makes b what the pipe has to write, without waiting, and closeAfter
// whether to close it then; pump writes what does not fit at once.
func (p *pipe) feed(b []byte, closeAfter bool) error {
	if p.fd == 0 {
		p.fd = int(p.parent.Fd()) // Fd makes the file blocking: first, then non-blocking
		if err := unix.SetNonblock(p.fd, true); err != nil {
			return err
		}
	}
	p.pending, p.closeAfter = b, closeAfter
	p.writeAvailable()
	return nil
}

// writing says whether the pipe has bytes to write.
func (p *pipe) writing() bool { return p != nil && p.parent != nil && len(p.pending) > 0 }

// writeAvailable writes what the pipe takes now; at a reader's end what
// is left is dropped.
func (p *pipe) writeAvailable() {
	for p.writing() {
		n, err := unix.Write(p.fd, p.pending)
		if n > 0 {
			p.pending = p.pending[n:]
			continue
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.EAGAIN) {
			return
		}
		p.pending = nil
	}
	if p != nil && p.closeAfter && p.parent != nil {
		p.parent.Close()
		p.parent = nil
	}
}

// callPipes makes a call's stdin, stdout and stderr, and what closes them.
func callPipes(stdout, stderr io.Writer) (in, out, errOut *pipe, closeAll func(), err error) {
	var made []*os.File
	mk := func(to io.Writer) (*pipe, error) {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		made = append(made, r, w)
		if to != nil {
			p, err := reading(r, to)
			if err != nil {
				return nil, err
			}
			p.child = w
			return p, nil
		}
		return &pipe{child: r, parent: w}, nil
	}
	closeAll = func() {
		for _, f := range made {
			f.Close()
		}
	}
	if in, err = mk(nil); err == nil {
		if out, err = mk(stdout); err == nil {
			errOut, err = mk(stderr)
		}
	}
	if err != nil {
		closeAll()
		return nil, nil, nil, nil, err
	}
	return in, out, errOut, closeAll, nil
}

// reaper reaps every child of the init, orphans included, and passes the
// status of the processes it was asked to watch on.
type reaper struct {
	mu      sync.Mutex
	waiting map[int]chan unix.WaitStatus
	notify  *os.File
}

// start starts a process and watches it: it holds the lock across the
// start so that the process's exit cannot be reaped before it is watched.
func (r *reaper) start(path string, argv []string, attr *os.ProcAttr) (int, <-chan unix.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	proc, err := os.StartProcess(path, argv, attr)
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan unix.WaitStatus, 1)
	r.waiting[proc.Pid] = ch
	return proc.Pid, ch, nil
}

// reap reaps every child that has ended.
func (r *reaper) reap() {
	for {
		var st unix.WaitStatus
		pid, err := unix.Wait4(-1, &st, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		r.mu.Lock()
		ch, ok := r.waiting[pid]
		delete(r.waiting, pid)
		r.mu.Unlock()
		if ok {
			ch <- st
			r.notify.Write([]byte{eventExit})
		}
	}
}

// kernel is a session's running kernel: a process that reads one request
// line per call on fd 4 and writes one reply line on fd 5 (sockets, see
// kernelChannel), its output on stdout and stderr (see the kernels of
// package task/exec); fd 3 is its tool channel, when the session has them.
type kernel struct {
	pid      int
	exited   <-chan unix.WaitStatus
	status   *unix.WaitStatus
	requests *pipe
	out, err *pipe
	replies  *pipe
	reply    *lineBuffer
	tools    *pipe
}

// runKernel runs a call's code in the session's kernel, starting one when
// none runs. At the timeout, or when interrupted, the kernel gets SIGINT,
// and is killed when it has not replied InterruptGrace later.
func (s *session) runKernel(c call) (int, launch.CallEnd) {
	var end launch.CallEnd
	k := s.kernel
	if k == nil {
		var err error
		if k, err = s.startKernel(c.spec); err != nil {
			fmt.Fprintf(s.stderr, "sandboxd-init: kernel: %v\n", err)
			end.KernelDied = true
			return exitCannotRun, end
		}
		s.kernel = k
	}
	req, _ := json.Marshal(map[string]string{"code": c.spec.Code})
	if err := k.requests.feed(append(req, '\n'), false); err != nil {
		fmt.Fprintf(s.stderr, "sandboxd-init: kernel: %v\n", err)
	}
	k.reply.reset()
	s.pump(c.spec, k.requests, []*pipe{k.out, k.err, k.replies}, k.tools, func() bool {
		if k.status == nil {
			select {
			case st := <-k.exited:
				k.status = &st
			default:
			}
		}
		return k.status != nil || k.reply.complete()
	}, func(interrupted bool) {
		end.TimedOut, end.Interrupted = !interrupted, interrupted
		_ = unix.Kill(k.pid, unix.SIGINT)
	}, func() {
		_ = unix.Kill(-k.pid, unix.SIGKILL)
	})
	if k.status != nil || !k.reply.complete() {
		// It died, or was killed: the next kernel call starts another.
		if k.status == nil {
			_ = unix.Kill(-k.pid, unix.SIGKILL)
			st := <-k.exited
			k.status = &st
		}
		k.close()
		s.kernel = nil
		end.KernelDied = true
		return exitCode(*k.status), end
	}
	end.Reply = k.reply.line()
	var reply struct {
		Status string `json:"status"`
	}
	if json.Unmarshal(end.Reply, &reply) != nil {
		end.Reply = nil
		return 1, end
	}
	if reply.Status != "ok" {
		return 1, end
	}
	return 0, end
}

// startKernel starts the kernel of spec.Argv with its pipes.
func (s *session) startKernel(spec launch.Spec) (*kernel, error) {
	_, out, errOut, closeAll, err := callPipes(s.stdout, s.stderr)
	if err != nil {
		return nil, err
	}
	reqR, reqW, err := kernelChannel()
	if err != nil {
		closeAll()
		return nil, err
	}
	repR, repW, err := kernelChannel()
	if err != nil {
		closeAll()
		reqR.Close()
		reqW.Close()
		return nil, err
	}
	k := &kernel{requests: &pipe{parent: reqW}, out: out, err: errOut, reply: &lineBuffer{}}
	if k.replies, err = reading(repR, k.reply); err != nil {
		closeAll()
		return nil, err
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer devNull.Close()
	var channel *os.File // closed at fd 3 without tools
	if s.tools {
		if k.tools, err = s.toolChannel(); err != nil {
			closeAll()
			reqR.Close()
			repW.Close()
			k.close()
			return nil, err
		}
		channel = k.tools.child
	}
	k.pid, k.exited, err = s.start(spec, spec.Argv, []*os.File{devNull, out.child, errOut.child, channel, reqR, repW}, false)
	out.closeChild()
	errOut.closeChild()
	if k.tools != nil {
		k.tools.closeChild()
	}
	reqR.Close()
	repW.Close()
	if err != nil {
		k.close()
		return nil, err
	}
	return k, nil
}

// kernelChannel is one way of the kernel's requests and replies: a
// socket pair shut down the other way, not a pipe. A call runs under the
// kernel's uid and may see its /proc (gVisor lists /proc/PID/fd to it,
// where runc's non-dumpable kernel hides it); a pipe can be opened again
// through /proc/PID/fd/N, a socket never (ENXIO on Linux and on gVisor),
// so no call can write the kernel's requests or forge its replies.
func kernelChannel() (r, w *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	if err := errors.Join(unix.Shutdown(fds[0], unix.SHUT_WR), unix.Shutdown(fds[1], unix.SHUT_RD)); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, err
	}
	return os.NewFile(uintptr(fds[0]), "kernel-read"), os.NewFile(uintptr(fds[1]), "kernel-write"), nil
}

func (k *kernel) close() {
	for _, p := range []*pipe{k.requests, k.out, k.err, k.replies, k.tools} {
		if p != nil {
			p.closeParent()
		}
	}
}

// lineBuffer keeps a kernel's reply, one line of at most MaxDataBytes;
// beyond that it is dropped.
type lineBuffer struct {
	b    []byte
	over bool
}

func (l *lineBuffer) Write(p []byte) (int, error) {
	if len(l.b)+len(p) > launch.MaxDataBytes {
		l.over = true
		l.b = l.b[:0]
	}
	if !l.over {
		l.b = append(l.b, p...)
	}
	return len(p), nil
}

func (l *lineBuffer) reset() { l.b, l.over = l.b[:0], false }

func (l *lineBuffer) complete() bool {
	return len(l.b) > 0 && l.b[len(l.b)-1] == '\n'
}

func (l *lineBuffer) line() []byte {
	if l.over || !l.complete() {
		return nil
	}
	return append([]byte(nil), l.b[:len(l.b)-1]...)
}
