package reproducer

import (
	"bytes"
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/task/judge"
	"github.com/sandboxd/sandboxd/task/run"
)

// judgementBundle is the bundle of judgement j of sub, as the engine
// writes it.
func judgementBundle(t *testing.T, sub judge.Submission, j *judge.Judgement) *Recorded {
	t.Helper()
	py, _ := images.Default().Language("python")
	m, src := judge.Manifest(judge.Plan{Submission: sub, Language: &py}, j, judge.Ran{StartedAt: time.Unix(1, 0), EndedAt: time.Unix(2, 0)})
	var b, zst bytes.Buffer
	digest, err := artifacts.Build(&b, m, src)
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := zstd.NewWriter(&zst)
	enc.Write(b.Bytes())
	enc.Close()
	rec, err := Load(&zst, digest, artifacts.DefaultReadLimits())
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func TestAJudgementsBundleGivesBackItsSubmission(t *testing.T) {
	seed := uint64(7)
	sub := judge.Submission{Language: "python", Code: "print(input())", Image: "sha256:python", Runtime: "runc", Seed: &seed,
		Limits: limits.Limits{MemoryBytes: 64 << 20}, Env: map[string]string{"A": "1"}, StopOnFailure: true, Isolation: judge.IsolationShared,
		Files:   []run.File{{Path: "data/x.txt", Content: []byte("x")}},
		Checker: &judge.Checker{Language: "python", Code: "import sys"},
		Cases: []judge.Case{
			{Name: "one", Stdin: []byte("1\n"), Expected: []byte("1\n"), Args: []string{"-v"}, Limits: limits.Limits{Timeout: time.Second}},
			{Name: "tol", Stdin: []byte{}, Expected: []byte("0.5"), Compare: judge.Compare{Kind: judge.CompareNumbers, Absolute: 1e-6}},
			{Name: "test", Test: "assert True"},
			{Name: "checked", Stdin: []byte("2"), Compare: judge.Compare{Kind: judge.CompareChecker}},
		}}
	j := &judge.Judgement{ID: "j1", Verdict: judge.WrongAnswer, Isolation: judge.IsolationShared, ImageDigest: "sha256:python", Runtime: "runc",
		Cases: []judge.CaseResult{{Verdict: judge.Accepted, Stdout: []byte("1\n")}, {Verdict: judge.WrongAnswer}, {Verdict: judge.Skipped}, {Verdict: judge.Skipped}}}
	rec := judgementBundle(t, sub, j)
	if !rec.IsJudgement() {
		t.Fatal("IsJudgement: false for a judgement's bundle")
	}
	got, err := rec.Submission()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sub) {
		t.Fatalf("the submission from its bundle:\n%+v\nwant\n%+v", got, sub)
	}
	// A replay whose verdicts match reproduced; one that differs names
	// the case.
	replayed := *j
	rep, err := ReplayJudgement(context.Background(), rec, func(context.Context, judge.Submission) (judge.Judgement, error) { return replayed, nil }, Options{DefaultRuntime: "runc"})
	if err != nil || !rep.Reproduced {
		t.Fatalf("the same verdicts: %+v, %v", rep, err)
	}
	replayed.Cases = append([]judge.CaseResult{}, j.Cases...)
	replayed.Cases[1].Verdict = judge.TimeLimit
	rep, err = ReplayJudgement(context.Background(), rec, func(context.Context, judge.Submission) (judge.Judgement, error) { return replayed, nil }, Options{DefaultRuntime: "runc"})
	if err != nil || rep.Reproduced || rep.Checks[2].Match || rep.Checks[2].Name != "case 2 (tol) verdict" {
		t.Fatalf("a changed verdict: %+v, %v; want case 2 named as differing", rep, err)
	}
}
