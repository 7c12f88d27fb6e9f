// Command sandboxd-init is PID 1 of every sandboxd container: it waits on
// its stdin for one task and runs it (internal/sandbox/sandboxinit).
//
//	sandboxd-init --wait
//
// It is built static (CGO_ENABLED=0) and bound read-only into containers.
package main

import (
	"os"

	"github.com/sandboxd/sandboxd/internal/sandbox/sandboxinit"
)

func main() { os.Exit(sandboxinit.Run(os.Args[1:])) }
