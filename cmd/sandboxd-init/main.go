// Command sandboxd-init is PID 1 of every sandboxd container. It starts the
// task's program, forwards signals to it, reaps orphans, and exits with the
// program's status (128+N when signal N ended it), so that the program has
// the signal semantics it would have outside a container.
//
//	sandboxd-init -- ARGV...   start ARGV (a container made for its task)
//	sandboxd-init --wait       read the task from stdin first (a pooled
//	                           container; see runtime/launch)
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

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/runtime/launch"
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
	var spec launch.Spec
	switch {
	case len(args) >= 2 && args[0] == "--":
		wd, _ := os.Getwd()
		spec = launch.Spec{Argv: args[1:], Env: os.Environ(), Dir: wd}
	case len(args) == 1 && args[0] == "--wait":
		var err error
		if spec, err = launch.Read(os.Stdin); err != nil {
			fmt.Fprintf(os.Stderr, "sandboxd-init: %v\n", err)
			return exitUsage
		}
	default:
		fmt.Fprintln(os.Stderr, "usage: sandboxd-init -- ARGV... | sandboxd-init --wait")
		return exitUsage
	}
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
