package sandboxinit

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/sandbox/launch"
)

// interpreter is a pre-started interpreter waiting on the read end of
// program for its program (see launch.Prestarter).
type interpreter struct {
	proc    *os.Process
	program *os.File
}

// prestart starts spec's argv as the program's user, with its environment
// and limits, and its program pipe as launch.ProgramFD. It shares the
// init's stdin, which it does not read before its program runs: the
// task's message still comes to the init.
func prestart(spec launch.Spec) (*interpreter, error) {
	if spec.UID == 0 || spec.GID == 0 {
		return nil, errors.New("the program must not run as root")
	}
	if spec.Nproc > 0 {
		lim := unix.Rlimit{Cur: uint64(spec.Nproc), Max: uint64(spec.Nproc)}
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, &lim); err != nil {
			return nil, fmt.Errorf("set RLIMIT_NPROC: %w", err)
		}
	}
	os.Clearenv()
	for _, kv := range spec.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			os.Setenv(k, v)
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	files := make([]*os.File, launch.ProgramFD+1)
	files[0], files[1], files[2], files[launch.ProgramFD] = os.Stdin, os.Stdout, os.Stderr, r
	proc, _ := startProcess(spec, spec.Argv, files)
	if proc == nil {
		w.Close()
		return nil, errors.New("it did not start")
	}
	return &interpreter{proc: proc, program: w}, nil
}

// run hands the interpreter its program.
func (i *interpreter) run(spec launch.Spec) error {
	_, err := i.program.Write(launch.Program(spec.Argv, spec.Env, spec.Dir))
	return errors.Join(err, i.program.Close())
}

// discard ends the interpreter, which has run nothing of the task's. It
// is killed before its pipe is closed: woken by the end of its input, it
// could write to the program's streams before the kill lands.
func (i *interpreter) discard() {
	_ = i.proc.Kill()
	for {
		if _, err := unix.Wait4(i.proc.Pid, nil, 0, nil); !errors.Is(err, unix.EINTR) {
			break
		}
	}
	i.program.Close()
}
