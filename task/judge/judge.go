// Package judge is the vocabulary and the decisions of judging a program
// for a reward: a Submission (a program and its test Cases), how a case's
// output is compared with what was expected, the Verdict each run earns,
// and the Record a judgement leaves in its bundle. It runs nothing: the
// engine (package task) runs the compile, the cases and the checkers as
// ordinary runs and asks this package what they mean.
//
// A verdict is about the program; a failure of sandboxd or the host is
// SandboxError, never one of the program's verdicts, so that a reward
// pipeline retries it instead of rewarding it.
package judge

import (
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/task/run"
)

// Submission is a program and the cases it is judged on: code in a
// language, or input files and a command (Argv) that runs them.
type Submission struct {
	// ID is the caller's name for the submission, echoed in its events.
	ID       string
	Language string
	Code     string
	// Argv and Files are a submission that is a command: Files are placed
	// read-only under /input, and Argv runs in the image Image names.
	Argv  []string
	Files []run.File
	Cases []Case
	// Checker decides the cases whose Compare is CompareChecker.
	Checker *Checker
	// Image, Runtime, Env and Seed are as a run's options; Limits are
	// every case's, unless the case says otherwise.
	Image   string
	Runtime string
	Limits  limits.Limits
	Env     map[string]string
	Seed    *uint64
	// Isolation is where the cases run; the zero value is IsolationFresh.
	Isolation Isolation
	// StopOnFailure skips the cases after the first that is not accepted.
	StopOnFailure bool
	// IdempotencyKey makes a retried submission by the same caller get
	// the first one's judgement rather than a second.
	IdempotencyKey string
}

// Case is one test of a submission: the program's stdin, arguments and
// input files, and what its stdout must be, or a Test program run after
// the submission's code (HumanEval-style).
type Case struct {
	Name  string
	Stdin []byte
	Args  []string
	Files []run.File
	// Expected is the stdout the program must print, compared by Compare;
	// nil when Test or a checker decides.
	Expected []byte
	Compare  Compare
	// Test is code appended to the submission's, in its language, that
	// exits 0 when the submission passes (check(entry_point)).
	Test string
	// Limits override the submission's, field by field.
	Limits limits.Limits
}

// Compare is how a case's stdout is held against the expected one.
type Compare struct {
	Kind CompareKind
	// Absolute and Relative are the tolerances of CompareNumbers: a
	// number passes when |got-want| <= Absolute + Relative*|want|.
	Absolute, Relative float64
}

// CompareKind names a way of comparing output.
type CompareKind string

// The ways of comparing output.
const (
	// CompareLines is the default: equal once each line's trailing
	// whitespace and the trailing empty lines are dropped.
	CompareLines CompareKind = ""
	// CompareExact is byte for byte.
	CompareExact CompareKind = "exact"
	// CompareNumbers compares whitespace-separated tokens: numbers within
	// the tolerances, anything else exactly.
	CompareNumbers CompareKind = "numbers"
	// CompareChecker runs the submission's checker on the case.
	CompareChecker CompareKind = "checker"
)

// Checker is a program the caller gives that decides a case, run in a
// sandbox of its own: it reads the case's stdin, the expected stdout (if
// any) and the program's stdout from CheckerInput, CheckerExpected and
// CheckerOutput under /input, and exits 0 to accept, 1 to reject; any
// other end is the checker's failure, not the program's.
type Checker struct {
	Language string
	Code     string
}

// The files a checker reads, below /input.
const (
	CheckerInput    = "input"
	CheckerExpected = "expected"
	CheckerOutput   = "output"
)

// Isolation is where a submission's cases run.
type Isolation string

// The isolations a submission may ask for.
const (
	// IsolationFresh runs each case in a sandbox of its own: nothing one
	// case does reaches the next.
	IsolationFresh Isolation = "fresh"
	// IsolationShared runs every case, one after another, as a process
	// of one sandbox (a session): cheaper, and what a case leaves in
	// /workspace or /tmp the next one finds.
	IsolationShared Isolation = "shared"
)

// Verdict is what one case's run says of the program.
type Verdict string

// The verdicts. SandboxError is sandboxd's or the host's failure, never
// the program's; Skipped is a case after the first failure of a
// submission that stops there.
const (
	Accepted       Verdict = "ACCEPTED"
	WrongAnswer    Verdict = "WRONG_ANSWER"
	TimeLimit      Verdict = "TIME_LIMIT"
	MemoryLimit    Verdict = "MEMORY_LIMIT"
	RuntimeError   Verdict = "RUNTIME_ERROR"
	OutputLimit    Verdict = "OUTPUT_LIMIT"
	CompileError   Verdict = "COMPILE_ERROR"
	SandboxError   Verdict = "SANDBOX_ERROR"
	Skipped        Verdict = "SKIPPED"
	verdictUnknown Verdict = ""
)

// CaseResult is how one case went.
type CaseResult struct {
	Index   int
	Name    string
	Verdict Verdict
	// Message says why, in one line: the first difference, the exit code
	// or signal, the checker's words, sandboxd's error.
	Message  string
	Status   run.Status
	ExitCode int
	Signal   int
	Duration time.Duration
	// PeakMemoryBytes is 0 when the backend does not report it.
	PeakMemoryBytes int64
	// Stdout and Stderr are what the program printed, up to the case's
	// limits; the truncation flags say there was more.
	Stdout, Stderr                   []byte
	StdoutTruncated, StderrTruncated bool
	// RunID and BundleDigest name the case's run and its own bundle.
	RunID        string
	BundleDigest string
}

// CompileResult is how a compiled submission's one compile went.
type CompileResult struct {
	OK       bool
	Message  string
	Duration time.Duration
	Stdout   []byte
	Stderr   []byte
	// RunID and BundleDigest name the compile's run and bundle.
	RunID        string
	BundleDigest string
}

// Judgement is a submission's judging: a verdict per case, and overall.
type Judgement struct {
	ID           string
	SubmissionID string
	Tenant       string
	// Verdict is ACCEPTED when every case is; SANDBOX_ERROR when any case
	// met one (retry the submission); otherwise the first failing case's.
	Verdict Verdict
	Passed  int
	// FirstFailing is the index of the first case not accepted, or -1.
	FirstFailing int
	Cases        []CaseResult
	// Compile is set for a compiled language.
	Compile   *CompileResult
	Isolation Isolation
	Image     string
	// ImageDigest, Runtime and RuntimeVersion are what the cases ran on.
	ImageDigest    string
	Runtime        string
	RuntimeVersion string
	Duration       time.Duration
	// BundleDigest names the submission's bundle; BundleError says why
	// none was stored.
	BundleDigest string
	BundleError  string
	// Retried says the judgement was the one an earlier call with the
	// same idempotency key made.
	Retried bool
}

// Summarise sets j's verdict, passed count and first failing case from
// its cases, and skips the cases after that one when the submission
// stops at its first failure.
func (j *Judgement) Summarise(stopOnFailure bool) {
	j.Passed, j.FirstFailing, j.Verdict = 0, -1, Accepted
	sandbox := false
	for i := range j.Cases {
		c := &j.Cases[i]
		if j.FirstFailing >= 0 && stopOnFailure {
			*c = CaseResult{Index: c.Index, Name: c.Name, Verdict: Skipped, Message: "skipped: the submission stops at its first failure"}
			continue
		}
		switch c.Verdict {
		case Accepted:
			j.Passed++
			continue
		case SandboxError:
			sandbox = true
		}
		if j.FirstFailing < 0 {
			j.FirstFailing = i
			j.Verdict = c.Verdict
		}
	}
	if sandbox {
		j.Verdict = SandboxError
	}
}
