package judge

import (
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/task/run"
)

// PreviewBytes is how much of each case's stdout and stderr a judgement's
// result carries; the bundle keeps them up to the case's limits.
const PreviewBytes = 1 << 10

// Ran is what the engine knew of the judgement's runs that the judgement
// does not say: where the cases ran, and when the judging started and
// ended.
type Ran struct {
	Started            run.Started
	Backend            string
	Instance, Version  string
	StartedAt, EndedAt time.Time
}

// Manifest is the bundle of judgement j of plan p: the submission as
// judged, each case's inputs, output and verdict, and the runs' ids and
// bundles. Its sources are the entries the manifest lists.
func Manifest(p Plan, j *Judgement, r Ran) (*artifacts.Manifest, []artifacts.Source) {
	s := p.Submission
	var src []artifacts.Source
	add := func(path string, b []byte, exec bool) { src = append(src, artifacts.BytesSource(path, b, exec)) }
	req := artifacts.Request{Kind: "judgement", Language: s.Language, Argv: s.Argv, Limits: s.Limits,
		Env: map[string]string{}, Files: []artifacts.InputFile{}, Network: "none", Mounts: []string{}, Workdir: run.WorkspaceDir}
	if s.Seed != nil {
		req.Seed = fmt.Sprint(*s.Seed)
	}
	for k, v := range s.Env {
		req.Env[k] = v
	}
	if s.Code != "" {
		add(artifacts.DirCode+"/"+codeFile(p), []byte(s.Code), false)
	}
	for _, f := range s.Files {
		req.Files = append(req.Files, artifacts.InputFile{Path: f.Path, Executable: f.Executable})
		add(artifacts.DirInput+"/"+f.Path, f.Content, f.Executable)
	}
	rec := &artifacts.Judgement{Isolation: string(j.Isolation), StopOnFailure: s.StopOnFailure,
		Verdict: string(j.Verdict), Passed: j.Passed, FirstFailing: j.FirstFailing, Cases: []artifacts.JudgedCase{}}
	judged := &artifacts.Judged{Cases: []artifacts.JudgedRun{}}
	if s.Checker != nil {
		rec.Checker = s.Checker.Language
		add(artifacts.EntryChecker, []byte(s.Checker.Code), false)
	}
	if c := j.Compile; c != nil {
		cr := p.CompileRequest()
		rec.Compile = &artifacts.JudgedCompile{OK: c.OK, Argv: cr.Command.Argv, Built: []string{}}
		for _, f := range p.Built {
			rec.Compile.Built = append(rec.Compile.Built, f.Path)
		}
		judged.Compile = &artifacts.JudgedRun{RunID: c.RunID, Bundle: c.BundleDigest, DurationMs: ms(c.Duration), Message: c.Message}
		add(artifacts.DirCompile+"/stdout", c.Stdout, false)
		add(artifacts.DirCompile+"/stderr", c.Stderr, false)
	}
	for i, c := range s.Cases {
		res := j.Cases[i]
		dir := fmt.Sprintf("%s/%d/", artifacts.DirCases, i)
		jc := artifacts.JudgedCase{Name: c.Name, Args: c.Args, Stdin: c.Stdin != nil, Expected: c.Expected != nil,
			Test: c.Test != "", Compare: string(c.Compare.Kind), Absolute: c.Compare.Absolute, Relative: c.Compare.Relative,
			Limits: c.Limits, Verdict: string(res.Verdict), Status: string(res.Status), ExitCode: res.ExitCode, Signal: res.Signal}
		for _, f := range c.Files {
			jc.Files = append(jc.Files, artifacts.InputFile{Path: f.Path, Executable: f.Executable})
			add(dir+artifacts.DirInput+"/"+f.Path, f.Content, f.Executable)
		}
		if c.Stdin != nil {
			add(dir+artifacts.EntryStdin, c.Stdin, false)
		}
		if c.Expected != nil {
			add(dir+"expected", c.Expected, false)
		}
		if c.Test != "" {
			add(dir+"test", []byte(c.Test), false)
		}
		if res.Verdict != Skipped {
			add(dir+artifacts.EntryStdout, res.Stdout, false)
			add(dir+artifacts.EntryStderr, res.Stderr, false)
		}
		rec.Cases = append(rec.Cases, jc)
		judged.Cases = append(judged.Cases, artifacts.JudgedRun{RunID: res.RunID, Bundle: res.BundleDigest,
			DurationMs: ms(res.Duration), PeakMemoryBytes: res.PeakMemoryBytes, Message: res.Message})
	}
	m := &artifacts.Manifest{
		Reproducible: artifacts.Reproducible{
			Request: req, Image: j.Image, ImageDigest: j.ImageDigest,
			Runtime: artifacts.Runtime{Name: j.Runtime, Version: j.RuntimeVersion}, Backend: r.Backend,
			Environment: []string{}, Determinism: map[string]string{},
			Outcome:   artifacts.Outcome{Status: string(j.Verdict)},
			Outputs:   []artifacts.Output{},
			Judgement: rec,
		},
		Run: artifacts.Run{RunID: j.ID, Tenant: j.Tenant, Instance: r.Instance, Version: r.Version,
			StartedAt: r.StartedAt.UTC(), FinishedAt: r.EndedAt.UTC(), DurationMs: ms(r.EndedAt.Sub(r.StartedAt)),
			Message: fmt.Sprintf("%d of %d cases accepted", j.Passed, len(j.Cases)), Judged: judged},
	}
	return m, src
}

// codeFile is the name the submission's code has in its bundle.
func codeFile(p Plan) string {
	if p.Language != nil {
		return p.Language.File
	}
	return "code"
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
