package task

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/judge"
	"github.com/sandboxd/sandboxd/task/run"
)

// mountOf is the host folder of a spec's target.
func mountOf(spec runtime.Spec, target string) string {
	for _, m := range spec.Mounts {
		if m.Target == target {
			return m.Source
		}
	}
	return ""
}

// judgedProgram stands for the programs a judge runs. A program's code (or, run
// as a command, the file its argv names under /input) is one word:
//
//	double   prints twice the number on stdin
//	hang     runs until killed
//	crash    exits 3
//	compile  (as gcc) writes "double" to the -o path in /workspace
//	accept   (as a checker) exits 0 when output equals expected, else 1
//	broken   (as a checker) exits 2
func judgedProgram(ctx context.Context, spec runtime.Spec) runtime.Exit {
	word := ""
	switch {
	case slices.Contains(spec.Argv, "-o"):
		out := spec.Argv[slices.Index(spec.Argv, "-o")+1]
		src := spec.Argv[len(spec.Argv)-1]
		code, _ := os.ReadFile(filepath.Join(mountOf(spec, run.InputDir), filepath.Base(src)))
		if strings.TrimSpace(string(code)) == "syntax error" {
			io.WriteString(spec.Stderr, "main.c:1:1: error: expected ';'\n")
			return runtime.Exit{Code: 1}
		}
		os.WriteFile(filepath.Join(mountOf(spec, run.WorkspaceDir), filepath.Base(out)), []byte("double"), 0o755)
		return runtime.Exit{}
	case slices.ContainsFunc(spec.Argv, func(a string) bool { return strings.HasPrefix(a, run.InputDir+"/") }):
		i := slices.IndexFunc(spec.Argv, func(a string) bool { return strings.HasPrefix(a, run.InputDir+"/") })
		b, _ := os.ReadFile(filepath.Join(mountOf(spec, run.InputDir), strings.TrimPrefix(spec.Argv[i], run.InputDir+"/")))
		word = string(b)
	default:
		dir := mountOf(spec, "/code")
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
			word = string(b)
		}
	}
	if slices.Contains(spec.Argv, "host-fails") {
		return runtime.Exit{Code: 137}
	}
	var in []byte
	if spec.Stdin != nil {
		in, _ = io.ReadAll(spec.Stdin)
	}
	switch strings.TrimSpace(word) {
	case "double":
		n, _ := strconv.Atoi(strings.TrimSpace(string(in)))
		fmt.Fprintf(spec.Stdout, "%d\n", 2*n)
	case "hang":
		<-ctx.Done()
		return runtime.Exit{Code: 137}
	case "crash":
		return runtime.Exit{Code: 3}
	case "accept", "broken":
		dir := mountOf(spec, run.InputDir)
		got, _ := os.ReadFile(filepath.Join(dir, judge.CheckerOutput))
		want, _ := os.ReadFile(filepath.Join(dir, judge.CheckerExpected))
		switch {
		case strings.TrimSpace(word) == "broken":
			io.WriteString(spec.Stderr, "Traceback: the checker's bug\n")
			return runtime.Exit{Code: 2}
		case bytes.Equal(got, want):
			return runtime.Exit{}
		}
		io.WriteString(spec.Stdout, "expected "+string(want))
		return runtime.Exit{Code: 1}
	}
	return runtime.Exit{}
}

// hostFails fails to start the containers whose argv names host-fails,
// as a broken host would.
type hostFails struct{ *fake.Runtime }

func (h hostFails) Start(ctx context.Context, spec runtime.Spec) (runtime.Container, error) {
	if slices.Contains(spec.Argv, "host-fails") {
		return nil, errors.New("the host ran out of pids")
	}
	return h.Runtime.Start(ctx, spec)
}

func newJudge(t *testing.T) (*Service, *fake.Runtime) {
	t.Helper()
	rt := fake.New(judgedProgram)
	rt.Images["sandboxd/gcc"] = "sha256:gcc"
	s := newService(t, hostFails{rt}, func(c *Config) { c.AllowedImages = append(c.AllowedImages, "sha256:gcc") }, withStore(t))
	return s, rt
}

func cases(pairs ...string) []judge.Case {
	var out []judge.Case
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, judge.Case{Name: "c" + strconv.Itoa(i/2), Stdin: []byte(pairs[i]), Expected: []byte(pairs[i+1])})
	}
	return out
}

func TestEvaluateGivesEachCaseItsVerdict(t *testing.T) {
	s, rt := newJudge(t)
	ctx := context.Background()
	for _, c := range []struct {
		code    string
		cases   []judge.Case
		verdict judge.Verdict
		each    []judge.Verdict
	}{
		{"double", cases("2", "4\n", "5", "10"), judge.Accepted, []judge.Verdict{judge.Accepted, judge.Accepted}},
		{"double", cases("2", "4\n", "5", "11"), judge.WrongAnswer, []judge.Verdict{judge.Accepted, judge.WrongAnswer}},
		{"crash", cases("2", "4"), judge.RuntimeError, []judge.Verdict{judge.RuntimeError}},
		{"hang", []judge.Case{{Expected: []byte("1"), Limits: limits.Limits{Timeout: 200 * time.Millisecond}}}, judge.TimeLimit, []judge.Verdict{judge.TimeLimit}},
	} {
		j, err := s.Evaluate(ctx, judge.Submission{Language: "python", Code: c.code, Cases: c.cases}, EvaluateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var each []judge.Verdict
		for _, r := range j.Cases {
			each = append(each, r.Verdict)
		}
		if j.Verdict != c.verdict || !slices.Equal(each, c.each) {
			t.Errorf("%s: %s %v, want %s %v", c.code, j.Verdict, each, c.verdict, c.each)
		}
		if j.BundleDigest == "" || j.Isolation != judge.IsolationFresh || j.Cases[0].RunID == "" {
			t.Errorf("%s: bundle %q (%s), isolation %q, run %q: want a bundle, fresh sandboxes, a run per case", c.code, j.BundleDigest, j.BundleError, j.Isolation, j.Cases[0].RunID)
		}
	}
	// Each case had a container of its own.
	if n := len(rt.Specs()); n != 2+2+1+1 {
		t.Errorf("%d containers for 6 cases, want one each", n)
	}
}

func TestEvaluateTellsSandboxdsFailureFromTheProgram(t *testing.T) {
	s, _ := newJudge(t)
	cs := cases("2", "4", "3", "6")
	cs[0].Args = []string{"host-fails"}
	j, err := s.Evaluate(context.Background(), judge.Submission{Language: "python", Code: "double", Cases: cs}, EvaluateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if j.Verdict != judge.SandboxError || j.Cases[0].Verdict != judge.SandboxError || !strings.Contains(j.Cases[0].Message, "out of pids") || j.Cases[1].Verdict != judge.Accepted {
		t.Fatalf("judgement %s, cases %s (%s) and %s: want SANDBOX_ERROR for the host's failure alone", j.Verdict, j.Cases[0].Verdict, j.Cases[0].Message, j.Cases[1].Verdict)
	}
}

func TestEvaluateStopsAtTheFirstFailure(t *testing.T) {
	s, _ := newJudge(t)
	var heard []int
	j, err := s.Evaluate(context.Background(), judge.Submission{Language: "python", Code: "double", StopOnFailure: true,
		Cases: cases("1", "2", "2", "5", "3", "6", "4", "8")}, EvaluateOptions{Slots: make(chan struct{}, 1), Progress: func(c judge.CaseResult) { heard = append(heard, c.Index) }})
	if err != nil {
		t.Fatal(err)
	}
	got := []judge.Verdict{j.Cases[0].Verdict, j.Cases[1].Verdict, j.Cases[2].Verdict, j.Cases[3].Verdict}
	if want := []judge.Verdict{judge.Accepted, judge.WrongAnswer, judge.Skipped, judge.Skipped}; !slices.Equal(got, want) || j.FirstFailing != 1 || j.Passed != 1 {
		t.Fatalf("verdicts %v, first failing %d, passed %d; want %v, 1, 1", got, j.FirstFailing, j.Passed, want)
	}
	if !slices.Equal(heard, []int{0, 1}) {
		t.Errorf("progress heard cases %v; one slot runs them in turn and stops after case 1", heard)
	}
}

func TestEvaluateCompilesOnceAndRunsWhatItBuilt(t *testing.T) {
	s, rt := newJudge(t)
	j, err := s.Evaluate(context.Background(), judge.Submission{Language: "c", Code: "int main() {}", Cases: cases("1", "2", "2", "4", "3", "6")}, EvaluateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if j.Verdict != judge.Accepted || j.Compile == nil || !j.Compile.OK || j.Compile.BundleDigest == "" {
		t.Fatalf("judgement %s, compile %+v: want ACCEPTED after one compile", j.Verdict, j.Compile)
	}
	compiles := 0
	for _, spec := range rt.Specs() {
		if slices.Contains(spec.Argv, "-o") {
			compiles++
		} else if spec.Argv[0] != "/input/.program" || len(spec.Compile) > 0 {
			t.Errorf("a case ran %q (compile %q), want the built /input/.program", spec.Argv, spec.Compile)
		}
	}
	if compiles != 1 {
		t.Errorf("%d compiles for 3 cases, want 1", compiles)
	}
	j, err = s.Evaluate(context.Background(), judge.Submission{Language: "c", Code: "syntax error", Cases: cases("1", "2", "2", "4")}, EvaluateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if j.Verdict != judge.CompileError || j.Cases[1].Verdict != judge.CompileError || !strings.Contains(j.Compile.Message, "expected ';'") || j.Cases[0].RunID != "" {
		t.Fatalf("judgement %s, case 2 %s, compile %q: want COMPILE_ERROR everywhere, the compiler's words, and no case run", j.Verdict, j.Cases[1].Verdict, j.Compile.Message)
	}
}

func TestEvaluateAsksTheCallersChecker(t *testing.T) {
	s, _ := newJudge(t)
	cs := cases("2", "4\n", "3", "7\n")
	for i := range cs {
		cs[i].Compare.Kind = judge.CompareChecker
	}
	sub := judge.Submission{Language: "python", Code: "double", Cases: cs, Checker: &judge.Checker{Language: "python", Code: "accept"}}
	j, err := s.Evaluate(context.Background(), sub, EvaluateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if j.Cases[0].Verdict != judge.Accepted || j.Cases[1].Verdict != judge.WrongAnswer || !strings.Contains(j.Cases[1].Message, "the checker rejected it: expected 7") {
		t.Fatalf("cases %s and %s (%s): want the checker's verdicts and words", j.Cases[0].Verdict, j.Cases[1].Verdict, j.Cases[1].Message)
	}
	sub.Checker.Code = "broken"
	_, err = s.Evaluate(context.Background(), sub, EvaluateOptions{})
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "checker: failed on cases[0]") || !strings.Contains(err.Error(), "the checker's bug") {
		t.Fatalf("a checker that fails: %v; want INVALID_ARGUMENT naming the checker and its words", err)
	}
}

func TestEvaluateOnceAKey(t *testing.T) {
	s, rt := newJudge(t)
	sub := judge.Submission{ID: "a", Language: "python", Code: "double", Cases: cases("2", "4"), IdempotencyKey: "step-7/sub-1"}
	first, err := s.Evaluate(context.Background(), sub, EvaluateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ran := len(rt.Specs())
	sub.ID = "renumbered"
	again, err := s.Evaluate(context.Background(), sub, EvaluateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != first.ID || !again.Retried || first.Retried || len(rt.Specs()) != ran {
		t.Fatalf("a retry: judgement %s (retried %v), %d containers; want %s again, retried, none new", again.ID, again.Retried, len(rt.Specs())-ran, first.ID)
	}
	sub.Code = "crash"
	if _, err := s.Evaluate(context.Background(), sub, EvaluateOptions{}); !errdefs.IsAlreadyExists(err) || !strings.Contains(err.Error(), "idempotency_key") {
		t.Fatalf("another submission with the key: %v; want ALREADY_EXISTS naming idempotency_key", err)
	}
}

func TestEvaluateBadInputCreatesNothing(t *testing.T) {
	s, rt := newJudge(t)
	for _, sub := range []judge.Submission{
		{Language: "cobol", Code: "x", Cases: cases("1", "2")},
		{Language: "python", Code: "x", Cases: []judge.Case{{Stdin: []byte("1")}}},
		{Language: "python", Code: "x", Cases: cases("1", "2"), Checker: &judge.Checker{Language: "cobol", Code: "x"}},
		{Language: "python", Code: "x", Cases: cases("1", "2"), Image: "sandboxd/missing"},
	} {
		if _, err := s.Evaluate(context.Background(), sub, EvaluateOptions{}); err == nil || !errdefs.IsInvalidArgument(err) && !errdefs.IsNotFound(err) {
			t.Errorf("%+v: %v, want a refusal naming the field", sub, err)
		}
	}
	if n := len(rt.Specs()); n != 0 {
		t.Errorf("bad input made %d containers", n)
	}
}

func TestEvaluateBundleHasEveryCase(t *testing.T) {
	s, _ := newJudge(t)
	j, err := s.Evaluate(context.Background(), judge.Submission{Language: "python", Code: "double", Cases: cases("2", "4", "3", "7")}, EvaluateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.OpenBundle(context.Background(), j.BundleDigest)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entries := map[string]string{}
	b, err := artifacts.Verify(f, j.BundleDigest, artifacts.DefaultReadLimits(), func(name string, r io.Reader) error {
		c, err := io.ReadAll(r)
		entries[name] = string(c)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := b.Manifest.Reproducible.Judgement
	if rec == nil || rec.Verdict != "WRONG_ANSWER" || rec.Cases[1].Verdict != "WRONG_ANSWER" || b.Manifest.Reproducible.Request.Kind != "judgement" {
		t.Fatalf("manifest %+v: want a judgement with its verdicts", b.Manifest.Reproducible)
	}
	for name, want := range map[string]string{"code/main.py": "double", "cases/1/stdin": "3", "cases/1/expected": "7", "cases/1/stdout": "6\n"} {
		if entries[name] != want {
			t.Errorf("%s = %q, want %q", name, entries[name], want)
		}
	}
	if run := b.Manifest.Run.Judged; run == nil || run.Cases[1].Bundle != j.Cases[1].BundleDigest {
		t.Errorf("the bundle's runs %+v: want each case's own bundle", run)
	}
}

func TestEvaluateSharedRunsEveryCaseInOneSandbox(t *testing.T) {
	s, rt := newJudge(t)
	cs := cases("1", "2", "2", "4", "3", "7")
	j, err := s.Evaluate(context.Background(), judge.Submission{Language: "python", Code: "double", Isolation: judge.IsolationShared, Cases: cs}, EvaluateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := []judge.Verdict{j.Cases[0].Verdict, j.Cases[1].Verdict, j.Cases[2].Verdict}
	if want := []judge.Verdict{judge.Accepted, judge.Accepted, judge.WrongAnswer}; !slices.Equal(got, want) || j.Isolation != judge.IsolationShared {
		t.Fatalf("verdicts %v in %q, want %v in shared", got, j.Isolation, want)
	}
	if n := rt.Prepared(); n != 1 {
		t.Errorf("%d containers for a shared submission's 3 cases, want 1", n)
	}
	if n := len(s.ListSessions(context.Background())); n != 0 {
		for _, i := range s.ListSessions(context.Background()) {
			if i.State == "ACTIVE" {
				t.Errorf("the shared sandbox %s outlived its judgement", i.ID)
			}
		}
	}
	cs[0].Files = []run.File{{Path: "x", Content: []byte("1")}}
	if _, err := s.Evaluate(context.Background(), judge.Submission{Language: "python", Code: "double", Isolation: judge.IsolationShared, Cases: cs}, EvaluateOptions{}); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "cases[0].files") {
		t.Errorf("a shared case with files of its own: %v, want INVALID_ARGUMENT naming cases[0].files", err)
	}
}

func TestEvaluateIsCounted(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	rt := fake.New(judgedProgram)
	s := newService(t, rt, nil, withStore(t), WithMetrics(reg))
	ctx := access.WithCaller(context.Background(), access.Caller{Name: "team-a"})
	if _, err := s.Evaluate(ctx, judge.Submission{Language: "python", Code: "double", Cases: cases("1", "2", "2", "5")}, EvaluateOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := promtest.ToFloat64(s.metrics.judgements.WithLabelValues("WRONG_ANSWER", "fresh", "team-a")); n != 1 {
		t.Errorf("sandboxd_judgements_total{WRONG_ANSWER,fresh,team-a} = %v, want 1", n)
	}
	for v, want := range map[string]float64{"ACCEPTED": 1, "WRONG_ANSWER": 1} {
		if n := promtest.ToFloat64(s.metrics.judgedCases.WithLabelValues(v)); n != want {
			t.Errorf("sandboxd_judged_cases_total{%s} = %v, want %v", v, n, want)
		}
	}
	if problems, err := promtest.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("promlint: %v %+v", err, problems)
	}
}
