// Command sandboxd-init is PID 1 of every sandboxd container. It reads the
// task from its stdin (see runtime/launch), starts the task's program,
// forwards signals to it, and reaps orphans. When the program has ended it
// kills what the program left running, flushes the working directory's
// file system, writes the exit report that the task asked for on stdout
// and stderr, and exits with the program's status (128+N when signal N
// ended it), so that the program has the signal semantics it would have
// outside a container.
//
//	sandboxd-init --wait
//
// It is built static (CGO_ENABLED=0) and bound read-only into containers.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/launch"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// Exit codes of the init's own failures, as shells use them.
const (
	exitCannotRun = 126
	exitNotFound  = 127
	exitUsage     = 2
)

func run(args []string) int {
	if len(args) != 1 || args[0] != "--wait" {
		fmt.Fprintln(os.Stderr, "usage: sandboxd-init --wait")
		return exitUsage
	}
	// Not dumpable: the program, under the same user, can neither trace
	// the init nor read its memory or its /proc files, which hold the
	// report's token.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "sandboxd-init: prctl: %v\n", err)
		return exitCannotRun
	}
	spec, err := launch.Read(os.Stdin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandboxd-init: %v\n", err)
		return exitUsage
	}
	code := start(spec)
	if spec.Report != "" {
		report(spec, code)
	}
	return code
}

// start runs the program to its end and returns its status.
func start(spec launch.Spec) int {
	if spec.Nproc > 0 {
		lim := unix.Rlimit{Cur: uint64(spec.Nproc), Max: uint64(spec.Nproc)}
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, &lim); err != nil {
			fmt.Fprintf(os.Stderr, "sandboxd-init: set RLIMIT_NPROC: %v\n", err)
			return exitCannotRun
		}
	}
	// The program's PATH, not the init's, finds it.
	os.Clearenv()
	for _, kv := range spec.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			os.Setenv(k, v)
		}
	}
	path, err := exec.LookPath(spec.Argv[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandboxd-init: %s: command not found\n", spec.Argv[0])
		return exitNotFound
	}
	// Catch the signals to forward before the program can receive any.
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGCONT, syscall.SIGTSTP)
	proc, err := os.StartProcess(path, spec.Argv, &os.ProcAttr{
		Dir:   spec.Dir,
		Env:   spec.Env,
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandboxd-init: cannot run %s: %v\n", spec.Argv[0], unwrap(err))
		if errors.Is(err, os.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotRun
	}
	go func() {
		for sig := range signals {
			proc.Signal(sig)
		}
	}()
	return reap(proc.Pid)
}

// report ends every other process, flushes what they wrote to the working
// directory, and writes the exit report last on both streams.
func report(spec launch.Spec, code int) {
	endEverything()
	// Under gVisor a file's data can sit in the sandbox's cache until it
	// is flushed; sandboxd reads the outputs from the host.
	if fd, err := unix.Open(spec.Dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
		_ = unix.Syncfs(fd)
		unix.Close(fd)
	}
	line := launch.ReportLine(spec.Report, code)
	os.Stdout.Write(line)
	os.Stderr.Write(line)
}

// endBound bounds how long the init tries to end the program's leftovers;
// past it, the engine's kill of the container does.
const endBound = 5 * time.Second

// endEverything kills every other process of the PID namespace, all of the
// program's user (kill(-1) spares the init), and reaps them, round after
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
