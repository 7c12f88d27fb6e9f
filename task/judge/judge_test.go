package judge

import (
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/task/run"
)

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		name      string
		compare   Compare
		got, want string
		ok        bool
		why       string
	}{
		{"lines ignore trailing spaces and blank lines", Compare{}, "3 \n\n\n", "3\n", true, ""},
		{"lines see a changed line", Compare{}, "1\n2\n", "1\n3\n", false, `line 2: expected "3", got "2"`},
		{"lines see a missing line", Compare{}, "1\n", "1\n2\n", false, "line 2: expected \"2\", got the end of the output"},
		{"lines see an extra line", Compare{}, "1\n2\n", "1\n", false, "line 2: expected the end of the output"},
		{"lines keep leading spaces", Compare{}, " 3\n", "3\n", false, "line 1"},
		{"exact sees a trailing newline", Compare{Kind: CompareExact}, "3", "3\n", false, "byte 1 (line 1) differs: expected \"\\n\", got nothing"},
		{"exact equal", Compare{Kind: CompareExact}, "a\r\n", "a\r\n", true, ""},
		{"numbers within absolute", Compare{Kind: CompareNumbers, Absolute: 1e-6}, "0.3333333\n", "0.33333333", true, ""},
		{"numbers outside absolute", Compare{Kind: CompareNumbers, Absolute: 1e-9}, "0.3333", "0.33333333", false, "token 1: expected \"0.33333333\""},
		{"numbers within relative", Compare{Kind: CompareNumbers, Relative: 1e-3}, "1000.5", "1000", true, ""},
		{"numbers compare words exactly", Compare{Kind: CompareNumbers}, "YES 1", "YES 1.0", true, ""},
		{"numbers see a wrong word", Compare{Kind: CompareNumbers}, "NO 1", "YES 1", false, "token 1"},
		{"numbers refuse NaN", Compare{Kind: CompareNumbers, Absolute: 1}, "NaN", "1", false, "token 1"},
		{"numbers see a missing token", Compare{Kind: CompareNumbers}, "1", "1 2", false, "token 2: expected \"2\", got the end of the output"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ok, why := Match(c.compare, []byte(c.got), []byte(c.want))
			if ok != c.ok || !strings.Contains(why, c.why) {
				t.Fatalf("Match(%q, %q) = %v, %q; want %v, %q", c.got, c.want, ok, why, c.ok, c.why)
			}
		})
	}
}

func TestOfTellsTheProgramFromSandboxd(t *testing.T) {
	for _, c := range []struct {
		res  run.Result
		test bool
		want Verdict
	}{
		{run.Result{Status: run.StatusOK}, false, Accepted},
		{run.Result{Status: run.StatusOK, StdoutTruncated: true}, false, OutputLimit},
		{run.Result{Status: run.StatusNonzeroExit, ExitCode: 1}, false, RuntimeError},
		{run.Result{Status: run.StatusNonzeroExit, ExitCode: 1}, true, WrongAnswer},
		{run.Result{Status: run.StatusKilledBySignal, Signal: 11}, false, RuntimeError},
		{run.Result{Status: run.StatusTimeout}, false, TimeLimit},
		{run.Result{Status: run.StatusOOMKilled}, false, MemoryLimit},
		{run.Result{Status: run.StatusOutputLimit}, false, OutputLimit},
		{run.Result{Status: run.StatusCompileError}, false, CompileError},
		{run.Result{Status: run.StatusLost}, false, SandboxError},
		{run.Result{Status: run.StatusCancelled}, false, SandboxError},
		{run.Result{Status: run.StatusKernelDied}, false, SandboxError},
	} {
		if got, _ := Of(c.res, c.test); got != c.want {
			t.Errorf("Of(%s, test %v) = %s, want %s", c.res.Status, c.test, got, c.want)
		}
	}
}

func TestSummarise(t *testing.T) {
	j := Judgement{Cases: []CaseResult{{Verdict: Accepted}, {Verdict: WrongAnswer, Message: "line 1"}, {Verdict: Accepted}, {Verdict: TimeLimit}}}
	j.Summarise(false)
	if j.Verdict != WrongAnswer || j.Passed != 2 || j.FirstFailing != 1 || j.Cases[3].Verdict != TimeLimit {
		t.Fatalf("without stopping: %s, %d passed, first failing %d", j.Verdict, j.Passed, j.FirstFailing)
	}
	j.Summarise(true)
	if j.Passed != 1 || j.Cases[2].Verdict != Skipped || j.Cases[3].Verdict != Skipped || j.Cases[1].Message != "line 1" {
		t.Fatalf("stopping at the first failure: %d passed, cases %+v", j.Passed, j.Cases)
	}
	j = Judgement{Cases: []CaseResult{{Verdict: WrongAnswer}, {Verdict: SandboxError}}}
	j.Summarise(false)
	if j.Verdict != SandboxError || j.FirstFailing != 0 {
		t.Fatalf("a sandbox error anywhere: verdict %s, first failing %d; want SANDBOX_ERROR, 0", j.Verdict, j.FirstFailing)
	}
	j = Judgement{Cases: []CaseResult{{Verdict: Accepted}}}
	j.Summarise(true)
	if j.Verdict != Accepted || j.FirstFailing != -1 || j.Passed != 1 {
		t.Fatalf("all accepted: %s, first failing %d", j.Verdict, j.FirstFailing)
	}
}

func TestValidateNamesTheField(t *testing.T) {
	ok := func() Submission {
		return Submission{Language: "python", Code: "print(1)", Cases: []Case{{Expected: []byte("1\n")}}}
	}
	huge := make([]Case, MaxCases+1)
	for i := range huge {
		huge[i].Expected = []byte("1")
	}
	for _, c := range []struct {
		name   string
		mutate func(*Submission)
		field  string
	}{
		{"no cases", func(s *Submission) { s.Cases = nil }, "cases: is empty"},
		{"100,000 cases", func(s *Submission) { s.Cases = make([]Case, 100_000) }, "cases: has 100000 cases, above the limit of 1024"},
		{"too many cases", func(s *Submission) { s.Cases = huge }, "cases: has 1025 cases"},
		{"nothing decides", func(s *Submission) { s.Cases[0].Expected = nil }, "cases[0].expected_stdout: is not set, and neither is a test or a checker"},
		{"checker without one", func(s *Submission) { s.Cases[0].Compare.Kind = CompareChecker }, "cases[0].compare: is checker, and the submission has no checker"},
		{"test and expected", func(s *Submission) { s.Cases[0].Test = "assert True" }, "cases[0].test: decides the case by itself"},
		{"tolerance on a word", func(s *Submission) {
			s.Cases[0] = Case{Expected: []byte("1.5 YES"), Compare: Compare{Kind: CompareNumbers, Absolute: 1e-6}}
		}, `cases[0].expected_stdout: has "YES", which is not a number`},
		{"tolerance on exact", func(s *Submission) { s.Cases[0].Compare = Compare{Kind: CompareExact, Relative: 0.1} }, "cases[0].compare: has a tolerance"},
		{"negative tolerance", func(s *Submission) {
			s.Cases[0].Compare = Compare{Kind: CompareNumbers, Absolute: -1}
		}, "cases[0].compare: tolerances must be numbers of at least 0"},
		{"unknown comparison", func(s *Submission) { s.Cases[0].Compare.Kind = "fuzzy" }, `cases[0].compare: "fuzzy" is not`},
		{"64 MiB of stdin", func(s *Submission) { s.Cases[0].Stdin = make([]byte, 64<<20) }, "cases[0].request: stdin: is 67108864 bytes, above the limit"},
		{"a case's bad file", func(s *Submission) { s.Cases[0].Files = []run.File{{Path: "../x"}} }, "cases[0].request: files[0].path"},
		{"a test for a command", func(s *Submission) {
			*s = Submission{Argv: []string{"true"}, Cases: []Case{{Test: "x"}}}
		}, "cases[0].test: runs after the submission's code"},
		{"checker without language", func(s *Submission) { s.Checker = &Checker{Code: "x"} }, "checker.language: is empty"},
		{"empty code", func(s *Submission) { s.Code = "" }, "code: is empty"},
		{"unknown isolation", func(s *Submission) { s.Isolation = "vm" }, `isolation: "vm" is not`},
		{"cases too big together", func(s *Submission) {
			s.Cases = make([]Case, 4)
			for i := range s.Cases {
				s.Cases[i] = Case{Stdin: make([]byte, 15<<20), Expected: []byte("1")}
			}
		}, "cases: are 629145"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := ok()
			c.mutate(&s)
			err := s.Validate(run.DefaultBounds())
			if err == nil || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("Validate = %v, want an error with %q", err, c.field)
			}
		})
	}
	if err := ok().Validate(run.DefaultBounds()); err != nil {
		t.Fatalf("a sound submission: %v", err)
	}
}

func TestPlanRunsWhatTheCompileBuilt(t *testing.T) {
	cpp, _ := images.Default().Language("cpp")
	ts, _ := images.Default().Language("typescript")
	py, _ := images.Default().Language("python")
	sub := Submission{Language: "cpp", Code: "int main(){}", Limits: limits.Limits{MemoryBytes: 64 << 20},
		Cases: []Case{{Stdin: []byte("1"), Args: []string{"-v"}, Expected: []byte("1"), Limits: limits.Limits{Timeout: 2e9}}}}
	p := Plan{Submission: sub, Language: &cpp, Built: []run.File{{Path: ".program", Content: []byte("ELF"), Executable: true}}}
	c := p.CompileRequest()
	if got := strings.Join(c.Command.Argv, " "); !strings.Contains(got, "-o /workspace/.program") || !strings.HasSuffix(got, " /input/main.cpp") {
		t.Errorf("compile argv %q: want the program written to /workspace and the source read from /input", got)
	}
	if c.Options.Limits != (limits.Limits{}) || c.Options.Image != cpp.Image {
		t.Errorf("the compile runs with %+v in %q; want the daemon's defaults in %s", c.Options.Limits, c.Options.Image, cpp.Image)
	}
	r := p.CaseRequest(0)
	if got := strings.Join(r.Command.Argv, " "); got != "/input/.program -v" {
		t.Errorf("case argv %q, want /input/.program -v", got)
	}
	if r.Options.Limits.MemoryBytes != 64<<20 || r.Options.Limits.Timeout != 2e9 || string(r.Options.Stdin) != "1" || r.Options.Files[0].Path != ".program" {
		t.Errorf("case options %+v: want the case's limits over the submission's, its stdin and the built program", r.Options)
	}
	if !p.IsBuilt(".program") || p.IsBuilt("other") {
		t.Error("IsBuilt: .program is built, other is not")
	}
	p.Language = &ts
	if got := strings.Join(p.CompileRequest().Command.Argv, " "); !strings.Contains(got, "/workspace/.program.js") {
		t.Errorf("typescript compile %q: want it to write /workspace/.program.js", got)
	}
	p = Plan{Submission: Submission{Language: "python", Code: "import sys", Cases: []Case{{Args: []string{"a"}, Expected: []byte("")}, {Test: "assert f()"}}}, Language: &py}
	if got := strings.Join(p.CaseRequest(0).Command.Argv, " "); got != "python3 /input/main.py a" {
		t.Errorf("python with args: %q, want python3 /input/main.py a", got)
	}
	if got := p.CaseRequest(1).Program.Code; got != "import sys\n\nassert f()" {
		t.Errorf("a test case's code %q: want the submission's, then the test", got)
	}
}

func TestMatchNumbersAtTheEdges(t *testing.T) {
	for _, c := range []struct {
		got, want string
		ok        bool
	}{
		{"nan", "NaN", true},
		{"1", "NaN", false},
		{"+Inf", "inf", true},
		{"1e308", "inf", false},
		{"-inf", "inf", false},
	} {
		if ok, why := Match(Compare{Kind: CompareNumbers, Absolute: 1}, []byte(c.got), []byte(c.want)); ok != c.ok {
			t.Errorf("%q against %q: %v (%s), want %v", c.got, c.want, ok, why, c.ok)
		}
	}
}
