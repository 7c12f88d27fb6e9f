// Package sandboxinit is PID 1 of every sandboxd container (the
// sandboxd-init binary is only its main). It reads the task from its stdin
// (see internal/sandbox/launch), starts the task's program, forwards signals to it,
// and reaps orphans. When the program has ended it kills what the program
// left running, flushes the working directory's file system, writes the
// exit report that the task asked for on stdout and stderr, and exits with
// the program's status (128+N when signal N ended it), so that the program
// has the signal semantics it would have outside a container; when the
// task asks it to hold, only once sandboxd lets it (launch.Spec.Hold). For a
// session it serves calls, one after another, a Python kernel, and beside
// them background processes (with terminals) and connections to the
// container's loopback.
//
// It runs as root of the container with a few capabilities, before any
// untrusted code, and must stay small: it parses nothing of the program's
// but its exit and the report framing.
package sandboxinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/sandbox/launch"
)

// Exit codes of the init's own failures, as shells use them.
const (
	exitCannotRun = 126
	exitNotFound  = 127
	exitUsage     = 2
)

// Run is the init: args are its command line ("--wait"), and what it
// returns is its exit code.
func Run(args []string) int {
	if len(args) != 1 || args[0] != "--wait" {
		fmt.Fprintln(os.Stderr, "usage: sandboxd-init --wait")
		return exitUsage
	}
	// Not dumpable: besides running under another user than the program,
	// the init can neither be traced nor have its memory or its /proc
	// files read, which hold the report's token.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "sandboxd-init: prctl: %v\n", err)
		return exitCannotRun
	}
	// The program, under another user, cannot signal the init. Every
	// signal is caught all the same, from the start: the Go runtime would
	// end PID 1 with a stack dump on SIGSEGV, SIGABRT, SIGSYS or SIGTRAP
	// sent by kill(2). Some are passed on to the program; the rest are
	// dropped.
	signals := make(chan os.Signal, 64)
	signal.Notify(signals)
	// Before the task comes: in a pooled container, off its path.
	if err := emptyBoundingSet(); err != nil {
		fmt.Fprintf(os.Stderr, "sandboxd-init: dropping the capability bounding set: %v\n", err)
		return exitCannotRun
	}
	spec, err := launch.Read(os.Stdin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandboxd-init: %v\n", err)
		return exitUsage
	}
	var waiting *interpreter
	if spec.Prestart {
		if waiting, err = prestart(spec); err != nil {
			fmt.Fprintf(os.Stderr, "sandboxd-init: pre-start %s: %v\n", spec.Argv[0], err)
			return exitCannotRun
		}
		first := spec
		if spec, err = launch.Read(os.Stdin); err != nil {
			fmt.Fprintf(os.Stderr, "sandboxd-init: %v\n", err)
			return exitUsage
		}
		if spec.Prestart {
			fmt.Fprintln(os.Stderr, "sandboxd-init: an interpreter was pre-started already")
			return exitUsage
		}
		if !spec.Prestarted {
			// A fresh program, or a session, which runs its own kernel.
			waiting.discard()
			waiting = nil
		} else if spec.UID != first.UID || spec.GID != first.GID || spec.Nproc != first.Nproc {
			fmt.Fprintln(os.Stderr, "sandboxd-init: the task's user or RLIMIT_NPROC is not the pre-started interpreter's")
			return exitUsage
		}
	} else if spec.Prestarted {
		fmt.Fprintln(os.Stderr, "sandboxd-init: no interpreter was pre-started")
		return exitUsage
	}
	if spec.Tools && spec.Prestarted {
		fmt.Fprintln(os.Stderr, "sandboxd-init: a tool channel is for a program started afresh")
		return exitUsage
	}
	if spec.UID == 0 || spec.GID == 0 {
		fmt.Fprintln(os.Stderr, "sandboxd-init: the program must not run as root")
		return exitUsage
	}
	// Open now, while the init may read what only the program can: the
	// report flushes the working directory's file system through it.
	dir, err := unix.Open(spec.Dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandboxd-init: working directory %s: %v\n", spec.Dir, err)
		return exitCannotRun
	}
	if spec.Session {
		return serveSession(spec, dir, signals)
	}
	code, end := start(spec, signals, waiting)
	if spec.Report != "" {
		holding := spec.Hold && code != 128+int(syscall.SIGKILL)
		// SIGTERM lets go of the hold from the moment sandboxd has the
		// report, which may be at once: it is caught before the report.
		term := make(chan os.Signal, 1)
		if holding {
			signal.Notify(term, syscall.SIGTERM)
		}
		report(spec, dir, code, end)
		if holding {
			hold(term)
		}
	}
	return code
}

// hold keeps the container until sandboxd lets the init go (SIGTERM on
// term, or the control folder), or HoldBound has passed (see
// launch.Spec.Hold). The program and all it started have ended: only the
// init's exit is put off.
func hold(term <-chan os.Signal) {
	released := make(chan struct{})
	go awaitRelease(released)
	select {
	case <-term:
	case <-released:
	case <-time.After(launch.HoldBound):
	}
}

// awaitRelease closes released once launch.ControlRelease exists. Without
// a control folder (gVisor's containers) it returns, and SIGTERM lets the
// init go.
func awaitRelease(released chan<- struct{}) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return
	}
	if _, err := unix.InotifyAddWatch(fd, launch.ControlDir, unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		return
	}
	events := make([]byte, 4096)
	for {
		// Looked for after the watch is set, so that a release made
		// before it is not missed.
		if _, err := os.Lstat(launch.ControlRelease); err == nil {
			close(released)
			return
		}
		if _, err := unix.Read(fd, events); err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// forwarded are the signals passed on to the program, as a shell or a
// terminal would send them; any other signal the init receives is dropped.
var forwarded = map[os.Signal]bool{
	syscall.SIGTERM: true, syscall.SIGINT: true, syscall.SIGHUP: true, syscall.SIGQUIT: true,
	syscall.SIGUSR1: true, syscall.SIGUSR2: true, syscall.SIGWINCH: true, syscall.SIGCONT: true, syscall.SIGTSTP: true,
}

// start runs the program to its end, in the waiting interpreter when the
// task is Prestarted, or after its compile step if it has one, and returns its status, passing on to
// the process that runs the forwarded signals among those received.
func start(spec launch.Spec, signals <-chan os.Signal, waiting *interpreter) (int, launch.RunEnd) {
	if spec.Nproc > 0 {
		lim := unix.Rlimit{Cur: uint64(spec.Nproc), Max: uint64(spec.Nproc)}
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, &lim); err != nil {
			fmt.Fprintf(os.Stderr, "sandboxd-init: set RLIMIT_NPROC: %v\n", err)
			return exitCannotRun, launch.RunEnd{}
		}
	}
	// The program's PATH, not the init's, finds it.
	os.Clearenv()
	for _, kv := range spec.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			os.Setenv(k, v)
		}
	}
	var running atomic.Pointer[os.Process]
	go func() {
		for sig := range signals {
			if p := running.Load(); p != nil && forwarded[sig] {
				p.Signal(sig)
			}
		}
	}()
	if spec.Prestarted {
		if err := waiting.run(spec); err != nil {
			waiting.discard()
			fmt.Fprintf(os.Stderr, "sandboxd-init: the pre-started interpreter did not take its program: %v\n", err)
			return exitCannotRun, launch.RunEnd{}
		}
		if err := keepOnly(unix.CAP_KILL); err != nil {
			_ = waiting.proc.Kill()
			fmt.Fprintf(os.Stderr, "sandboxd-init: dropping capabilities: %v\n", err)
			return exitCannotRun, launch.RunEnd{}
		}
		running.Store(waiting.proc)
		return reap(waiting.proc.Pid), launch.RunEnd{}
	}
	files := []*os.File{os.Stdin, os.Stdout, os.Stderr}
	if spec.Tools {
		r, err := newRelay()
		if err != nil {
			fmt.Fprintf(os.Stderr, "sandboxd-init: %v\n", err)
			return exitCannotRun, launch.RunEnd{}
		}
		files = r.program[:]
		defer func() {
			// The report comes after all the program's output.
			endEverything()
			r.drain()
		}()
		defer r.started()
	}
	if len(spec.Compile) > 0 {
		devNull, err := os.Open(os.DevNull)
		if err != nil {
			fmt.Fprintf(os.Stderr, "sandboxd-init: %v\n", err)
			return exitCannotRun, launch.RunEnd{}
		}
		proc, code := startProcess(spec, spec.Compile, []*os.File{devNull, files[2], files[2]})
		devNull.Close()
		if proc == nil {
			return code, launch.RunEnd{}
		}
		running.Store(proc)
		if code := reap(proc.Pid); code != 0 {
			return code, launch.RunEnd{CompileFailed: true}
		}
		// The program starts alone, as it would after a build elsewhere.
		endEverything()
	}
	proc, code := startProcess(spec, spec.Argv, files)
	if proc == nil {
		return code, launch.RunEnd{}
	}
	if err := keepOnly(unix.CAP_KILL); err != nil {
		_ = proc.Kill()
		fmt.Fprintf(os.Stderr, "sandboxd-init: dropping capabilities: %v\n", err)
		return exitCannotRun, launch.RunEnd{}
	}
	running.Store(proc)
	return reap(proc.Pid), launch.RunEnd{}
}

// startProcess starts argv as the program's user with files as its
// stdin, stdout and stderr; when it cannot, it says why on stderr and
// returns the exit code a shell would.
func startProcess(spec launch.Spec, argv []string, files []*os.File) (*os.Process, int) {
	path, err := lookPath(argv[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandboxd-init: %s: command not found\n", argv[0])
		return nil, exitNotFound
	}
	proc, err := os.StartProcess(path, argv, &os.ProcAttr{
		Dir:   spec.Dir,
		Env:   spec.Env,
		Files: files,
		Sys: &syscall.SysProcAttr{
			// Set before the working directory and the exec, which the
			// kernel then checks as the program's.
			Credential: &syscall.Credential{Uid: spec.UID, Gid: spec.GID, Groups: []uint32{}},
			// A session of its own: Linux lets any process send SIGCONT
			// to another of its session, whatever their users.
			Setsid: true,
		},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandboxd-init: cannot run %s: %v\n", argv[0], unwrap(err))
		if errors.Is(err, os.ErrNotExist) {
			return nil, exitNotFound
		}
		return nil, exitCannotRun
	}
	return proc, 0
}

// lookPath finds the program as a shell would. A name with a slash is left
// to the exec, which the kernel checks as the program's user; a name looked
// up in PATH is checked as the init's, which can only differ for a file
// in a folder of the program's own.
func lookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	return exec.LookPath(name)
}

// emptyBoundingSet empties the bounding set of every thread, which the
// program inherits: it then has no capability it could ever gain. The
// init keeps what it has, which the bounding set does not take away.
//
// Only what is in the set is dropped: each drop stops every thread of
// the init, which under gVisor costs ~3 ms, and the OCI runtime leaves
// just the init's five capabilities there. Every thread holds the same
// set (each drop is on all of them), so this thread's answers for all.
func emptyBoundingSet() error {
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		in, _, errno := syscall.Syscall(unix.SYS_PRCTL, unix.PR_CAPBSET_READ, uintptr(c), 0)
		if errno == unix.EINVAL {
			break // past this kernel's last capability
		}
		if errno != 0 {
			return fmt.Errorf("capability %d: %w", c, errno)
		}
		if in == 0 {
			continue
		}
		if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0); errno != 0 {
			return fmt.Errorf("capability %d: %w", c, errno)
		}
	}
	return nil
}

// keepOnly leaves the init, on every thread, with caps alone: CAP_KILL to
// forward signals and end the program's leftovers, and for a session the
// user changes that start its calls. What starting the first program
// needed besides is dropped once it runs.
func keepOnly(caps ...int) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	for _, c := range caps {
		data[c/32].Effective |= 1 << (c % 32)
		data[c/32].Permitted |= 1 << (c % 32)
	}
	_, _, errno := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// report ends every other process, flushes what they wrote to the working
// directory's file system (open as dir), and writes the exit report last
// on both streams.
func report(spec launch.Spec, dir, code int, end launch.RunEnd) {
	endEverything()
	// Under gVisor a file's data can sit in the sandbox's cache until it
	// is flushed; sandboxd reads the outputs from the host.
	_ = unix.Syncfs(dir)
	line := launch.ReportLine(spec.Report, code)
	out := line
	if end != (launch.RunEnd{}) {
		data, _ := json.Marshal(end)
		// One write: each is a message through the backend's attach.
		out = append(launch.DataLine(spec.Report, data), line...)
	}
	os.Stdout.Write(out)
	os.Stderr.Write(line)
}

// endBound bounds how long the init tries to end the program's leftovers;
// past it, the backend's kill of the container does.
const endBound = 5 * time.Second

// endEverything kills every other process of the PID namespace (kill(-1)
// spares the init), and reaps them, round after
// round until none is left: a process that forks while a kill(-1) goes
// through the processes can escape that round (gVisor delivers it one
// process at a time), not the next.
func endEverything() {
	deadline := time.Now().Add(endBound)
	for time.Now().Before(deadline) {
		_ = unix.Kill(-1, unix.SIGKILL)
		reaped := 0
		for {
			pid, err := unix.Wait4(-1, nil, unix.WNOHANG, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil || pid <= 0 {
				break // ECHILD: no child at all; 0: none has ended yet
			}
			reaped++
		}
		// A zombie still counts as a process: only once every child is
		// reaped does kill(-1, 0) find none.
		if err := unix.Kill(-1, 0); errors.Is(err, unix.ESRCH) {
			return
		}
		if reaped == 0 {
			time.Sleep(time.Millisecond)
		}
	}
}

// reap waits for every child, orphans included, until the program exits,
// and returns its status. Orphans still running go with the container.
func reap(pid int) int {
	for {
		var status unix.WaitStatus
		got, err := unix.Wait4(-1, &status, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "sandboxd-init: wait: %v\n", err)
			return exitCannotRun
		}
		if got != pid {
			continue
		}
		switch {
		case status.Exited():
			return status.ExitStatus()
		case status.Signaled():
			return 128 + int(status.Signal())
		}
	}
}

// unwrap drops the "fork/exec PATH:" prefix that os adds.
func unwrap(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
