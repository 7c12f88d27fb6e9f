package reproducer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/judge"
	"github.com/sandboxd/sandboxd/task/run"
)

// Judge judges one submission: a daemon's Evaluate, or the engine's.
type Judge func(ctx context.Context, sub judge.Submission) (judge.Judgement, error)

// IsJudgement says whether rec is a judgement's bundle.
func (r *Recorded) IsJudgement() bool { return r.Manifest().Reproducible.Judgement != nil }

// Submission rebuilds the judged submission from a judgement's bundle: its
// program, cases, checker and options, on the recorded image digest and
// runtime.
func (r *Recorded) Submission() (judge.Submission, error) {
	m := r.Manifest().Reproducible
	rec, q := m.Judgement, m.Request
	if rec == nil {
		return judge.Submission{}, errors.New("the bundle is not a judgement's")
	}
	entry := func(p string) ([]byte, error) {
		b, ok := r.Entries[p]
		if !ok {
			return nil, fmt.Errorf("the judgement's bundle lacks %s", p)
		}
		return b, nil
	}
	sub := judge.Submission{Language: q.Language, Argv: q.Argv, Image: m.ImageDigest, Runtime: m.Runtime.Name, Limits: q.Limits,
		Env: q.Env, StopOnFailure: rec.StopOnFailure, Isolation: judge.Isolation(rec.Isolation)}
	if q.Seed != "" {
		seed, err := strconv.ParseUint(q.Seed, 10, 64)
		if err != nil {
			return judge.Submission{}, fmt.Errorf("seed %q: %w", q.Seed, err)
		}
		sub.Seed = &seed
	}
	if q.Language != "" {
		for p, b := range r.Entries {
			if dir, _, ok := strings.Cut(p, "/"); ok && dir == artifacts.DirCode {
				sub.Code = string(b)
			}
		}
	}
	for _, f := range q.Files {
		b, err := entry(artifacts.DirInput + "/" + f.Path)
		if err != nil {
			return judge.Submission{}, err
		}
		sub.Files = append(sub.Files, run.File{Path: f.Path, Content: b, Executable: f.Executable})
	}
	if rec.Checker != "" {
		b, err := entry(artifacts.EntryChecker)
		if err != nil {
			return judge.Submission{}, err
		}
		sub.Checker = &judge.Checker{Language: rec.Checker, Code: string(b)}
	}
	for i, c := range rec.Cases {
		dir := fmt.Sprintf("%s/%d/", artifacts.DirCases, i)
		jc := judge.Case{Name: c.Name, Args: c.Args, Limits: c.Limits,
			Compare: judge.Compare{Kind: judge.CompareKind(c.Compare), Absolute: c.Absolute, Relative: c.Relative}}
		var err error
		if c.Stdin {
			if jc.Stdin, err = entry(dir + artifacts.EntryStdin); err != nil {
				return judge.Submission{}, err
			}
		}
		if c.Expected {
			if jc.Expected, err = entry(dir + "expected"); err != nil {
				return judge.Submission{}, err
			}
		}
		if c.Test {
			b, err := entry(dir + "test")
			if err != nil {
				return judge.Submission{}, err
			}
			jc.Test = string(b)
		}
		for _, f := range c.Files {
			b, err := entry(dir + artifacts.DirInput + "/" + f.Path)
			if err != nil {
				return judge.Submission{}, err
			}
			jc.Files = append(jc.Files, run.File{Path: f.Path, Content: b, Executable: f.Executable})
		}
		sub.Cases = append(sub.Cases, jc)
	}
	return sub, nil
}

// ReplayJudgement judges rec's submission again and compares each case's
// verdict: it reproduced when every verdict did. A case whose output
// differs under the same verdict is a warning.
func ReplayJudgement(ctx context.Context, rec *Recorded, j Judge, opts Options) (*Report, error) {
	sub, err := rec.Submission()
	if err != nil {
		return nil, err
	}
	if err := opts.check(run.Request{Options: run.Options{Runtime: sub.Runtime}}); err != nil {
		return nil, err
	}
	m := rec.Manifest()
	var warnings []string
	got, err := j(ctx, sub)
	var missing *task.ImageMissingError
	if errors.As(err, &missing) && opts.AllowImageDrift {
		warnings = append(warnings, fmt.Sprintf("image %s is not present; judged again on the current %s", sub.Image, m.Reproducible.Image))
		sub.Image = m.Reproducible.Image
		got, err = j(ctx, sub)
	}
	if err != nil {
		return nil, err
	}
	rep := &Report{Kind: "judgement", Reproduced: true, RecordedBundle: rec.Bundle.Digest, ReplayedBundle: got.BundleDigest,
		RecordedRun: m.Run.RunID, ReplayedRun: got.ID, Warnings: warnings}
	add := func(c Check) {
		rep.Checks = append(rep.Checks, c)
		rep.Reproduced = rep.Reproduced && c.Match
	}
	add(scalar("verdict", m.Reproducible.Judgement.Verdict, string(got.Verdict)))
	for i, c := range m.Reproducible.Judgement.Cases {
		name := fmt.Sprintf("case %d", i+1)
		if c.Name != "" {
			name += " (" + c.Name + ")"
		}
		if i >= len(got.Cases) {
			add(Check{Name: name + " verdict", Recorded: c.Verdict, Replayed: "missing"})
			continue
		}
		g := got.Cases[i]
		add(scalar(name+" verdict", c.Verdict, string(g.Verdict)))
		if c.Verdict == string(g.Verdict) && c.Verdict != string(judge.Skipped) {
			was := rec.Entries[fmt.Sprintf("%s/%d/%s", artifacts.DirCases, i, artifacts.EntryStdout)]
			if len(g.Stdout) < judge.PreviewBytes && string(was) != string(g.Stdout) {
				rep.Warnings = append(rep.Warnings, name+": the same verdict, and a different stdout")
			}
		}
	}
	return rep, nil
}
