package judge

import (
	"fmt"

	"github.com/sandboxd/sandboxd/task/run"
)

// Of is the verdict a case's run earns by how it ended, before its output
// is compared: Accepted means "ended well, compare the output". test says
// the run was the submission with a test program, whose exit is its
// verdict. A status that is sandboxd's (a lost run, a dead kernel) is a
// SandboxError.
func Of(res run.Result, test bool) (Verdict, string) {
	switch res.Status {
	case run.StatusOK:
		if res.StdoutTruncated {
			return OutputLimit, fmt.Sprintf("printed %d bytes, above the stdout limit of %d: the output cannot be compared", res.StdoutTotal, res.Limits.StdoutBytes)
		}
		return Accepted, ""
	case run.StatusNonzeroExit:
		if test {
			return WrongAnswer, fmt.Sprintf("the test exited with code %d", res.ExitCode)
		}
		return RuntimeError, fmt.Sprintf("exited with code %d", res.ExitCode)
	case run.StatusKilledBySignal, run.StatusRuntimeError:
		return RuntimeError, res.Message
	case run.StatusTimeout:
		return TimeLimit, res.Message
	case run.StatusOOMKilled:
		return MemoryLimit, res.Message
	case run.StatusOutputLimit:
		return OutputLimit, res.Message
	case run.StatusCompileError:
		return CompileError, res.Message
	}
	// Cancelled, lost or a dead kernel: the program was not judged.
	return SandboxError, fmt.Sprintf("the run ended %s: %s", res.Status, res.Message)
}
