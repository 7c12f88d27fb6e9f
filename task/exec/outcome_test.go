package exec

import (
	"testing"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task/run"
)

func TestOutcome(t *testing.T) {
	lim := limits.Defaults()
	tests := []struct {
		name       string
		exit       runtime.Exit
		reason     killReason
		wantStatus run.Status
		wantSignal int
	}{
		{name: "zero", exit: runtime.Exit{Code: 0}, wantStatus: run.StatusOK},
		{name: "nonzero", exit: runtime.Exit{Code: 3}, wantStatus: run.StatusNonzeroExit},
		{name: "segfault", exit: runtime.Exit{Code: 139}, wantStatus: run.StatusKilledBySignal, wantSignal: 11},
		{name: "oom", exit: runtime.Exit{Code: 137, OOMKilled: true}, wantStatus: run.StatusOOMKilled, wantSignal: 9},
		{name: "oom of a child, program fine", exit: runtime.Exit{Code: 0, OOMKilled: true}, wantStatus: run.StatusOK},
		{name: "timeout wins over the kill signal", exit: runtime.Exit{Code: 137}, reason: killedTimeout, wantStatus: run.StatusTimeout, wantSignal: 9},
		{name: "timeout wins over oom", exit: runtime.Exit{Code: 137, OOMKilled: true}, reason: killedTimeout, wantStatus: run.StatusTimeout, wantSignal: 9},
		{name: "output flood", exit: runtime.Exit{Code: 137}, reason: killedOutput, wantStatus: run.StatusOutputLimit, wantSignal: 9},
		{name: "cancelled", exit: runtime.Exit{Code: 137}, reason: killedCancelled, wantStatus: run.StatusCancelled, wantSignal: 9},
		{name: "exit 255 is not a signal", exit: runtime.Exit{Code: 255}, wantStatus: run.StatusNonzeroExit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, msg, sig := outcome(tt.exit, tt.reason, "cancelled", run.Stdout, 16<<20, lim)
			if st != tt.wantStatus || sig != tt.wantSignal {
				t.Fatalf("outcome() = %s, %d; want %s, %d", st, sig, tt.wantStatus, tt.wantSignal)
			}
			if msg == "" {
				t.Fatal("outcome() gave no message")
			}
		})
	}
}
