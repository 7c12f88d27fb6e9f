// Command testprog is internal/testprog as a static binary, for the
// containers of the runtime contract suite.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/testprog"
	"github.com/sandboxd/sandboxd/runtime"
)

func main() {
	p := testprog.Process{
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Getenv: os.Getenv,
		Dir: func() string {
			d, _ := os.Getwd()
			return d
		},
		IDs: func() (int, int) { return os.Getuid(), os.Getgid() },
		Signal: func(n int) {
			sig := syscall.Signal(n)
			// The default action: die of it.
			signal.Reset(sig)
			syscall.Kill(os.Getpid(), sig)
			select {}
		},
	}
	// The tool channel, when the run has one; a call without fails.
	if _, err := unix.FcntlInt(uintptr(runtime.ToolsFD), unix.F_GETFD, 0); err == nil {
		p.Tools = os.NewFile(uintptr(runtime.ToolsFD), "tools")
	}
	os.Exit(testprog.Run(context.Background(), p, os.Args[1:]))
}
