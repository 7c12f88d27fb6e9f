package exec

import (
	"bytes"
	"encoding/json"
	"io"
	"time"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/task/output"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/taskdir"
)

// bundle collects the outputs and writes the run's bundle. A failure here
// loses no result: the run happened, and the result says why it has no
// bundle.
func (r *Run) bundle(ws *taskdir.Dir, st *streams, res *run.Result) {
	s := &r.ex.cfg
	sources := r.inputSources(st)
	budget := s.Output.Bytes
	if s.Store != nil {
		used := int64(manifestSlack)
		for _, src := range sources {
			used += src.Size
		}
		budget = min(budget, s.Store.MaxBundleBytes()-used)
	}
	found, err := taskdir.Collect(ws.Path(taskdir.Workspace), s.Output, max(budget, 0), r.unchanged)
	if err != nil {
		res.BundleError = "collect outputs: " + err.Error()
		s.Log.Error("collect outputs", "run", r.ID, "tenant", r.Tenant, "err", err)
		return
	}
	defer found.Close()
	res.Files = found.Outputs
	if s.Store == nil {
		return
	}
	m := r.manifest(res, found)
	write := s.Store.Write
	if r.session != nil {
		// A session's call answers in milliseconds: its bundle is made
		// durable just after (see artifacts.Store.WriteLater).
		write = s.Store.WriteLater
	}
	digest, _, err := write(m, append(sources, found.Sources...))
	if err != nil {
		res.BundleError = err.Error()
		s.Log.Error("write bundle", "run", r.ID, "tenant", r.Tenant, "err", err)
		return
	}
	res.BundleDigest = digest
	res.ReproducibleDigest = m.Run.ReproducibleDigest
	res.Files = m.Reproducible.Outputs
}

// manifestSlack is room kept in a bundle's byte budget for its manifest
// and tar headers.
const manifestSlack = 4 << 20

// inputSources are the bundle's entries other than output files: the code,
// inputs, stdin, and the stored stdout and stderr.
func (r *Run) inputSources(st *streams) []artifacts.Source {
	var out []artifacts.Source
	if p := r.Request.Program; p != nil {
		out = append(out, artifacts.BytesSource(artifacts.DirCode+"/"+r.Plan.Language.File, []byte(p.Code), false))
	}
	for _, f := range r.Request.Options.Files {
		out = append(out, artifacts.BytesSource(artifacts.DirInput+"/"+f.Path, f.Content, f.Executable))
	}
	if r.Request.Options.Stdin != nil {
		out = append(out, artifacts.BytesSource(artifacts.EntryStdin, r.Request.Options.Stdin, false))
	}
	out = append(out, r.extraSources...)
	if r.tools != nil && (len(r.Plan.Tools) > 0 || len(r.tools.Calls()) > 0) {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		for _, c := range r.tools.Calls() {
			_ = enc.Encode(c)
		}
		out = append(out, artifacts.BytesSource(artifacts.EntryToolCalls, b.Bytes(), false))
	}
	if r.tools != nil {
		if specs := r.tools.Specs(); len(specs) > 0 {
			// What a replay holds its calls to, offline: each tool's schema.
			b, _ := json.Marshal(specs)
			out = append(out, artifacts.BytesSource(artifacts.EntryToolSpecs, b, false))
		}
	}
	for _, w := range []*output.Writer{st.stdout, st.stderr} {
		f := w.Store
		size, sum := w.Stored()
		out = append(out, artifacts.Source{Path: w.Stream.String(), Size: size, SHA256: sum, Open: func() (io.ReadCloser, error) {
			return io.NopCloser(io.NewSectionReader(f, 0, size)), nil
		}})
	}
	return out
}

// manifest describes the run for its bundle.
func (r *Run) manifest(res *run.Result, found *taskdir.Collected) *artifacts.Manifest {
	o := r.Request.Options
	req := artifacts.Request{
		Argv: r.Plan.Argv, Network: string(r.Plan.Network.Mode), Mounts: append([]string{}, o.Mounts...),
		Env: map[string]string{}, Workdir: r.Plan.Workdir, Seed: r.Plan.Seed, Stdin: o.Stdin != nil,
		Files:  []artifacts.InputFile{},
		Limits: res.Limits, Prestarted: r.ranIn != nil, Preimported: r.preimported(), Tools: r.Plan.Tools,
	}
	if pol := r.Plan.Network; pol.Mode == netpolicy.AllowList {
		req.NetworkPolicy, req.NetworkRules, req.NetworkCaps = pol.Name, o.Network.Rules, &pol.Caps
		req.NetworkSecrets = pol.Secrets
	}
	if r.Request.Program != nil {
		req.Kind, req.Language = "code", r.Request.Program.Language
	} else {
		req.Kind, req.Shell = "command", r.Request.Command.Shell
	}
	for k, v := range o.Env {
		req.Env[k] = v
	}
	for _, f := range o.Files {
		req.Files = append(req.Files, artifacts.InputFile{Path: f.Path, Executable: f.Executable})
	}
	vars := r.envVars()
	determinism := map[string]string{"hostname": sandboxHostname}
	for _, k := range determinismKeys {
		if v, ok := vars[k]; ok {
			determinism[k] = v
		}
	}
	outputs := found.Outputs
	if outputs == nil {
		outputs = []artifacts.Output{}
	}
	var network *artifacts.Network
	if res.Network != nil {
		network = &artifacts.Network{Rules: r.netRules, Summary: *res.Network}
	}
	return &artifacts.Manifest{
		Reproducible: artifacts.Reproducible{
			Request: req, Image: r.ImageName, ImageDigest: r.Image.ID, ImageRecipe: r.Image.Labels[images.LabelRecipe],
			ImagePackages: r.ex.packagesOf(r.ImageName, r.Image.ID),
			Runtime:       artifacts.Runtime{Name: r.OCIRuntime.Name, Version: r.OCIRuntime.Version},
			Backend:       r.Info.Backend, Seccomp: r.OCIRuntime.Seccomp, Environment: SortedEnv(vars), Determinism: determinism,
			Outcome: artifacts.Outcome{
				Status: string(res.Status), ExitCode: res.ExitCode, Signal: res.Signal,
				StdoutTotal: res.StdoutTotal, StderrTotal: res.StderrTotal,
				StdoutTruncated: res.StdoutTruncated, StderrTruncated: res.StderrTruncated,
				Kernel: r.kernel,
			},
			Outputs:          outputs,
			OutputsTruncated: found.Truncated,
		},
		Run: artifacts.Run{
			RunID: r.ID, Tenant: r.Tenant, Instance: r.ex.cfg.Instance, Version: r.ex.cfg.Version,
			StartedAt: r.startedAt.UTC(), FinishedAt: r.finishedAt.UTC(),
			DurationMs: float64(res.Duration) / float64(time.Millisecond), QueuedMs: float64(r.Queued) / float64(time.Millisecond),
			PeakMemoryBytes: res.PeakMemoryBytes, Message: res.Message, Start: string(res.Start), ColdReason: res.ColdReason,
			Network: network, Session: r.session, Replay: r.replay(),
		},
	}
}

// replay is what the bundle says of a replay: the bundle whose record
// answered its tool calls, and each request the record answered.
func (r *Run) replay() *artifacts.Replay {
	if r.Plan.Replay.Of == "" || r.tools == nil {
		return nil
	}
	rp := &artifacts.Replay{Of: r.Plan.Replay.Of, Supplied: r.Plan.Replay.Supplied, Answered: []artifacts.Answered{}}
	for _, c := range r.tools.Calls() {
		if c.RecordedFrom != "" {
			rp.Answered = append(rp.Answered, artifacts.Answered{Seq: c.Seq, Op: c.Op, Tool: c.Tool})
		}
	}
	return rp
}
