// Command testprog is internal/testprog as a static binary, for the
// containers of the runtime contract suite.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandboxd/sandboxd/internal/testprog"
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
	os.Exit(testprog.Run(context.Background(), p, os.Args[1:]))
}
