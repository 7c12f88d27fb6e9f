package exec

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task/run"
)

// killReason is why sandboxd killed a container, when it did.
type killReason int

const (
	notKilled killReason = iota
	killedCancelled
	killedTimeout
	killedOutput
)

// outcome maps how a container ended to a status, an explanation and the
// signal that ended it.
func outcome(exit runtime.Exit, reason killReason, cause string, flooded run.Stream, floodAt int64, lim limits.Limits) (run.Status, string, int) {
	sig := 0
	if exit.Code > 128 && exit.Code <= 128+64 {
		sig = exit.Code - 128
	}
	switch reason {
	case killedCancelled:
		return run.StatusCancelled, cause, sig
	case killedTimeout:
		return run.StatusTimeout, fmt.Sprintf("killed after the %v timeout", lim.Timeout), sig
	case killedOutput:
		return run.StatusOutputLimit, fmt.Sprintf("killed when %s passed %s", flooded, bytesString(floodAt)), sig
	}
	switch {
	case exit.OOMKilled && exit.Code != 0:
		return run.StatusOOMKilled, fmt.Sprintf("killed for lack of memory at the %s limit", bytesString(lim.MemoryBytes)), sig
	case exit.CompileFailed:
		// Before the kill by signal: a compiler that crashed did not
		// build the program either.
		return run.StatusCompileError, fmt.Sprintf("did not compile: the compiler exited with code %d; its output is on stderr", exit.Code), 0
	case exit.Code == 0 && exit.OOMKilled:
		return run.StatusOK, "exited with code 0 after a process of it was killed for lack of memory", 0
	case exit.Code == 0:
		return run.StatusOK, "exited with code 0", 0
	case sig != 0:
		return run.StatusKilledBySignal, fmt.Sprintf("killed by signal %d (%s)", sig, unix.SignalName(unix.Signal(sig))), sig
	}
	return run.StatusNonzeroExit, fmt.Sprintf("exited with code %d", exit.Code), 0
}

// bytesString prints a size in the largest binary unit that divides it.
func bytesString(n int64) string {
	for _, u := range []struct {
		size int64
		name string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d %s", n/u.size, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}
