package run

import (
	"time"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/netpolicy"
)

// Status is the typed outcome of a run.
type Status string

// The outcomes of a run. Only a failure of sandboxd itself is an error;
// everything the program does is one of these.
const (
	StatusOK             Status = "OK"
	StatusNonzeroExit    Status = "NONZERO_EXIT"
	StatusTimeout        Status = "TIMEOUT"
	StatusOOMKilled      Status = "OOM_KILLED"
	StatusOutputLimit    Status = "OUTPUT_LIMIT"
	StatusCancelled      Status = "CANCELLED"
	StatusKilledBySignal Status = "KILLED_BY_SIGNAL"
	StatusRuntimeError   Status = "RUNTIME_ERROR"
	// StatusKernelDied: a session's kernel ended during the call; the
	// session lives on and its next call in the kernel's language gets a
	// new kernel.
	StatusKernelDied Status = "KERNEL_DIED"
	// StatusLost: the daemon stopped (a crash, a kill) while the run ran;
	// it was not run again.
	StatusLost Status = "LOST"
	// StatusCompileError: a compiled language's program did not compile,
	// so it never ran; the compiler's output is its stderr.
	StatusCompileError Status = "COMPILE_ERROR"
)

// Started describes a run whose container is running.
type Started struct {
	RunID          string
	Limits         limits.Limits
	Image          string
	ImageDigest    string
	Runtime        string
	RuntimeVersion string
	Backend        string
	// Prestarted says the program runs in a pre-started interpreter,
	// which had imported Preimported.
	Prestarted  bool
	Preimported []string
	StartedAt   time.Time
}

// Result is how a run ended.
type Result struct {
	RunID string
	// Tenant is whose run it was.
	Tenant   string
	Status   Status
	ExitCode int
	// Signal is the signal that ended the program, or 0.
	Signal int
	// Duration is the wall time from container start to exit.
	Duration time.Duration
	// Queued is the time spent waiting for a free slot.
	Queued time.Duration
	// ToolCalls is how many tools the program called (docs/tools.md).
	ToolCalls                        int
	StdoutTotal, StderrTotal         int64
	StdoutTruncated, StderrTruncated bool
	// PeakMemoryBytes is 0 when the backend does not report it.
	PeakMemoryBytes int64
	Limits          limits.Limits
	// Message explains the status in one line.
	Message string
	// BundleDigest names the run's bundle; empty when none was stored.
	BundleDigest string
	// BundleError says why no bundle was stored.
	BundleError string
	// ReproducibleDigest is the digest of the bundle's reproducible part.
	ReproducibleDigest string
	// Files is what the program left in /workspace.
	Files []artifacts.Output
	// Start says whether the run took a pooled container (warm) or had
	// one made for it (cold), and ColdReason why it was cold.
	Start      StartPath
	ColdReason string
	// Network is what an allow-listed task's network did; nil for none.
	Network *netpolicy.Summary
	// Session places a session's call in the session's chain; Kernel is
	// what its kernel replied to Python code. Both nil for a single run.
	Session *artifacts.Session
	Kernel  *artifacts.KernelReply
}

// StartPath is how a run got its container.
type StartPath string

// The paths a run can take to its container.
const (
	StartWarm StartPath = "warm"
	StartCold StartPath = "cold"
)
