package task

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task/output"
	"github.com/sandboxd/sandboxd/task/pool"
	"github.com/sandboxd/sandboxd/task/registry"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/taskdir"
	"github.com/sandboxd/sandboxd/task/tools"
)

// sourceDateEpoch is the fixed SOURCE_DATE_EPOCH of every task
// (2000-01-01T00:00:00Z): tools that stamp times into files stamp this one.
const sourceDateEpoch = "946684800"

// run is one task being executed.
type execution struct {
	ex         *executor
	runs       *registry.Runs
	id         string
	tenant     string // whose run it is
	out        *registry.Live
	req        run.Request
	plan       plan
	image      runtime.Image
	imageName  string
	info       runtime.Info
	ociRuntime runtime.OCIRuntime
	queued     time.Duration
	obs        run.Observer
	emit       *output.Emitter // hands obs its events, once the streams are open
	ctx        context.Context
	cancel     context.CancelCauseFunc

	killOnce sync.Once
	reason   killReason
	flooded  run.Stream
	killed   chan struct{} // closed once the kill reason is set

	startedAt, finishedAt time.Time

	// warm is the pooled container the run claimed, or nil; coldReason
	// says why it has none.
	warm       *pool.Warm
	coldReason string
	// interp is where the program may run; ranIn, once it started, is
	// the pre-started interpreter it runs in, or nil for a fresh one.
	interp interpreterChoice
	ranIn  *runtime.Prestart

	// network is what an allow-listed task's network did, once it ended.
	network *netpolicy.Summary
	// containerExited says a session's container ended during the call:
	// the session ends after it.
	containerExited bool

	// For a call of a session: its place, the files it left as they were,
	// and its kernel's reply.
	session      *artifacts.Session
	unchanged    func(p string) bool
	kernel       *artifacts.KernelReply
	extraSources []artifacts.Source // the uploads before the call

	// tools is the run's tool channel, when it may call tools.
	tools *tools.Channel

	// What cleanup removes once the caller has the result.
	ws  *taskdir.Dir
	ctr runtime.Container
}

// cleanupTimeout bounds removing a run's container and folders, which must
// happen even when the caller is gone.
const cleanupTimeout = 30 * time.Second

// execute runs the task in phases: prepare its folders, run its container
// (streaming, limits, classification), then collect its outputs and write
// its bundle. The container and folders are left for cleanup, which runs
// whatever happened.
func (r *execution) execute() (run.Result, error) {
	var ws *taskdir.Dir
	if r.warm != nil {
		ws = r.warm.Dir
	} else {
		var err error
		if ws, err = r.ex.newWorkspace(r.id, r.plan.limits.DiskBytes, r.plan.network.Mode == netpolicy.AllowList); err != nil {
			return run.Result{}, err
		}
	}
	r.ws = ws
	if err := r.prepare(ws); err != nil {
		return run.Result{}, err
	}
	if len(r.plan.tools) > 0 {
		r.tools = r.ex.toolRun(r)
	}
	streams, err := r.openStreams(ws)
	if err != nil {
		return run.Result{}, err
	}
	defer streams.close()

	res, err := r.runContainer(ws, streams)
	if err != nil {
		return run.Result{}, err
	}
	res.Start, res.ColdReason = run.StartCold, r.coldReason
	if r.warm != nil {
		res.Start = run.StartWarm
	}
	res.Network = r.network
	if r.tools != nil {
		r.tools.Settled()
		res.ToolCalls = r.tools.Made()
	}
	res.StdoutTotal, res.StdoutTruncated = streams.stdout.Counts()
	res.StderrTotal, res.StderrTruncated = streams.stderr.Counts()
	r.bundle(ws, streams, &res)
	return res, nil
}

// cleanup removes the run's container, then its folders. It runs after the
// caller has the result: removing a container takes tens of milliseconds
// that need not sit on the request's path.
func (r *execution) cleanup() {
	s := r.ex
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if r.ctr != nil {
		if err := r.ctr.Remove(ctx); err != nil {
			s.log.Error("remove container", "run", r.id, "tenant", r.tenant, "container", r.ctr.ID(), "err", err)
		}
	}
	if r.ws != nil {
		if err := r.ws.Remove(); err != nil {
			s.log.Error("remove task folder", "run", r.id, "tenant", r.tenant, "err", err)
		}
	}
}

// prepare fills the task's folders before its container exists.
func (r *execution) prepare(ws *taskdir.Dir) error {
	if err := ws.WriteFiles(taskdir.Input, dirFiles(r.req.Options.Files)); err != nil {
		return err
	}
	var code []taskdir.File
	if r.req.Program != nil {
		code = []taskdir.File{{Path: r.plan.language.File, Content: []byte(r.req.Program.Code)}}
	}
	if len(r.plan.tools) > 0 {
		code = append(code, toolLibrary()...)
	}
	if err := ws.WriteFiles(taskdir.Code, code); err != nil {
		return err
	}
	return ws.MakeWorkdir(inWorkspace(r.plan.workdir))
}

// streams are a run's two output streams: capped for the caller, and kept
// on disk up to the kill threshold for the bundle.
type streams struct {
	stdout, stderr *output.Writer
	out            *registry.Live
}

func (r *execution) openStreams(ws *taskdir.Dir) (*streams, error) {
	s := r.ex
	lim := r.plan.limits
	em := output.NewEmitter(r.obs, func(err error) { r.kill(killedCancelled, err) })
	r.emit = em
	st := &streams{out: r.out}
	for _, w := range []struct {
		stream run.Stream
		limit  int64
		dst    **output.Writer
	}{{run.Stdout, lim.StdoutBytes, &st.stdout}, {run.Stderr, lim.StderrBytes, &st.stderr}} {
		f, err := os.OpenFile(ws.Path(w.stream.String()), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
		if err != nil {
			st.close()
			return nil, err
		}
		killAt := max(w.limit, s.cfg.KillOutputBytes)
		*w.dst = output.NewWriter(em, output.Cap{Stream: w.stream, Limit: w.limit, KillAt: killAt, OnFlood: r.flood, Store: f, Live: r.out})
	}
	r.out.Open(st.stdout.Store, st.stderr.Store)
	return st, nil
}

func (st *streams) close() {
	st.out.Close()
	for _, w := range []*output.Writer{st.stdout, st.stderr} {
		if w != nil {
			w.Store.Close()
		}
	}
}

// start launches the task in its pooled container, or starts a container
// for it. A pooled container that fails to take its task is removed, and
// the task gets a container of its own on the same folder.
func (r *execution) start(ws *taskdir.Dir, st *streams) (runtime.Container, error) {
	s := r.ex
	if w := r.warm; w != nil {
		task := r.spec(ws, st).Task()
		task.Prestarted = r.interp.inWarm && w.Prestart != nil
		err := w.Container.Launch(r.ctx, task)
		if err == nil {
			if task.Prestarted {
				r.ranIn = w.Prestart
			}
			return w.Container, nil
		}
		s.log.Warn("a pooled container failed to take its task; starting one for it", "run", r.id, "tenant", r.tenant, "err", err)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), cleanupTimeout)
		defer cancel()
		if err := w.Container.Remove(ctx); err != nil {
			s.log.Error("remove container", "run", r.id, "tenant", r.tenant, "err", err)
		}
		r.ctr = nil
		r.warm, r.coldReason = nil, "the pooled container failed: "+err.Error()
	}
	spec := r.spec(ws, st)
	if r.interp.inCold {
		spec.Prestart, r.ranIn = r.interp.prestart, r.interp.prestart
	}
	return s.rt.Start(r.ctx, spec)
}

// runContainer starts the container, streams its output, enforces the
// timeout and cancellation, and classifies how it ended. The container is
// removed before it returns.
func (r *execution) runContainer(ws *taskdir.Dir, st *streams) (run.Result, error) {
	lim := r.plan.limits
	if r.plan.network.Mode == netpolicy.AllowList {
		// The gateway refuses everything from the container's address
		// until the policy is bound, and again once the program is done.
		sess, err := r.ex.egress.Bind(ws.Egress, r.plan.network)
		if err != nil {
			return run.Result{}, fmt.Errorf("bind the network policy: %w", err)
		}
		defer func() {
			sum := sess.End()
			r.network = &sum
		}()
	}
	ctr, err := r.start(ws, st)
	if err != nil {
		r.startedAt, r.finishedAt = time.Now(), time.Now()
		switch {
		case errdefs.IsFailedPrecondition(err):
			// The engine refused this container: the task's failure.
			return r.result(run.StatusRuntimeError, -1, 0, err.Error(), runtime.Exit{}), nil
		case r.ctx.Err() != nil:
			return r.result(run.StatusCancelled, -1, 0, "cancelled before the program started: "+context.Cause(r.ctx).Error(), runtime.Exit{}), nil
		}
		return run.Result{}, err
	}
	r.startedAt = time.Now()
	r.ctr = ctr

	started := run.Started{
		RunID: r.id, Limits: lim, Image: r.imageName, ImageDigest: r.image.ID,
		Runtime: r.ociRuntime.Name, RuntimeVersion: r.ociRuntime.Version, Backend: r.info.Backend,
		Prestarted: r.ranIn != nil, Preimported: r.preimported(), StartedAt: r.startedAt.UTC(),
	}
	r.runs.Started(r.id, started)
	r.emit.Started(started)

	// The watcher turns the caller's cancellation and the timeout into a
	// kill of the whole container.
	exited := make(chan struct{})
	defer close(exited)
	go r.watch(ctr, lim.Timeout, exited)

	waitCtx, cancelWait := context.WithCancel(context.WithoutCancel(r.ctx))
	defer cancelWait()
	exit, err := ctr.Wait(waitCtx)
	if err != nil {
		return run.Result{}, fmt.Errorf("run %s: %w", r.id, err)
	}
	r.finishedAt = time.Now()
	if !exit.StartedAt.IsZero() && exit.FinishedAt.After(exit.StartedAt) {
		r.startedAt, r.finishedAt = exit.StartedAt, exit.FinishedAt
	}

	r.killOnce.Do(func() {}) // no kill reason can be set from here on
	cause := ""
	if r.reason == killedCancelled {
		cause = "cancelled: " + context.Cause(r.ctx).Error()
	}
	floodAt := st.stdout.KillAt
	if r.flooded == run.Stderr {
		floodAt = st.stderr.KillAt
	}
	status, msg, sig := outcome(exit, r.reason, cause, r.flooded, floodAt, lim)
	return r.result(status, exit.Code, sig, msg, exit), nil
}

func (r *execution) result(status run.Status, code, sig int, msg string, exit runtime.Exit) run.Result {
	return run.Result{
		RunID: r.id, Tenant: r.tenant, Status: status, ExitCode: code, Signal: sig,
		Duration: r.finishedAt.Sub(r.startedAt), Queued: r.queued, PeakMemoryBytes: exit.PeakMemoryBytes,
		Limits: r.plan.limits, Message: msg,
	}
}

// spec is the container of this run.
func (r *execution) spec(ws *taskdir.Dir, st *streams) runtime.Spec {
	spec := r.ex.containerSpec(r.id, r.image.ID, r.ociRuntime.Name, ws, r.plan.limits)
	spec.Mounts = append(spec.Mounts, r.plan.mounts...)
	spec.Argv, spec.Env, spec.WorkingDir = r.plan.argv, sortedEnv(r.envVars()), r.plan.workdir
	if r.req.Program != nil {
		spec.Compile = r.plan.language.Compile
	}
	spec.Stdout, spec.Stderr = st.stdout, st.stderr
	if r.tools != nil {
		spec.Tools = r.tools
	}
	if r.req.Options.Stdin != nil {
		spec.Stdin = bytes.NewReader(r.req.Options.Stdin)
	}
	return spec
}

// determinismKeys are the variables that make runs reproducible; bundles
// record their effective values.
var determinismKeys = []string{"PYTHONHASHSEED", "TZ", "LC_ALL", "SOURCE_DATE_EPOCH", "SANDBOX_SEED"}

// envVars is the program's environment: defaults chosen for reproducible,
// unbuffered runs, then the image's, then the request's variables.
func (r *execution) envVars() map[string]string {
	proxy := ""
	if r.plan.network.Mode == netpolicy.AllowList {
		proxy = r.ex.egress.ProxyURL()
	}
	vars := programEnv(r.image, r.plan.limits, r.plan.seed, proxy, r.req.Options.Env)
	if len(r.plan.tools) > 0 || r.plan.channel {
		// The library finds its channel by the variable, and is found
		// next to the program or, for a command or a transpiled
		// TypeScript program (or a session's kernel), by PYTHONPATH and
		// NODE_PATH.
		vars["SANDBOXD_TOOLS_FD"] = strconv.Itoa(runtime.ToolsFD)
		if _, set := vars["PYTHONPATH"]; !set {
			vars["PYTHONPATH"] = images.CodeDir
		}
		if _, set := vars["NODE_PATH"]; !set {
			vars["NODE_PATH"] = images.CodeDir + "/node_modules"
		}
	}
	return vars
}

// programEnv is the environment of a program on img with limits lim, seed
// and the egress proxy (both "" without), and the request's variables.
func programEnv(img runtime.Image, lim limits.Limits, seed, proxy string, reqEnv map[string]string) map[string]string {
	threads := strconv.FormatInt(max(1, lim.CPUMillis/1000), 10)
	vars := map[string]string{
		"PATH": "/usr/local/bin:/usr/bin:/bin",
		"HOME": "/tmp",
		// The task's uid has no account: tools that ask who runs them
		// read these first.
		"USER":                    "sandbox",
		"LOGNAME":                 "sandbox",
		"LANG":                    "C.UTF-8",
		"LC_ALL":                  "C.UTF-8",
		"TZ":                      "UTC",
		"PYTHONHASHSEED":          "0",
		"PYTHONDONTWRITEBYTECODE": "1",
		"SOURCE_DATE_EPOCH":       sourceDateEpoch,
		"MPLBACKEND":              "Agg",
		"OMP_NUM_THREADS":         threads,
		"OPENBLAS_NUM_THREADS":    threads,
	}
	if seed != "" {
		vars["SANDBOX_SEED"] = seed
	}
	// What the image's recipe sets (its env lines) comes before the
	// request's variables.
	for _, kv := range img.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	if proxy != "" {
		maps.Copy(vars, proxyEnv(proxy))
	}
	maps.Copy(vars, reqEnv)
	return vars
}

// sortedEnv is vars as sorted KEY=VALUE pairs.
func sortedEnv(vars map[string]string) []string {
	env := make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	return env
}

// kill records why the container is being killed (the first reason wins)
// and kills it.
func (r *execution) kill(reason killReason, cause error) {
	r.killOnce.Do(func() {
		r.reason = reason
		if reason == killedCancelled && cause != nil && r.ctx.Err() == nil {
			r.cancel(cause)
		}
		close(r.killed)
	})
}

// flood is called when an output stream passes its kill threshold.
func (r *execution) flood(s run.Stream) {
	r.killOnce.Do(func() {
		r.reason = killedOutput
		r.flooded = s
		close(r.killed)
	})
}

// watch kills the container when the run is cancelled, its time is up, or
// a kill reason was set, until the container has exited.
func (r *execution) watch(ctr runtime.Container, timeout time.Duration, exited <-chan struct{}) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-exited:
		return
	case <-r.ctx.Done():
		r.kill(killedCancelled, nil)
	case <-timer.C:
		r.killOnce.Do(func() {
			r.reason = killedTimeout
			close(r.killed)
		})
	case <-r.killed:
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), cleanupTimeout)
	defer cancel()
	if err := ctr.Kill(ctx); err != nil {
		r.ex.log.Error("kill container", "run", r.id, "tenant", r.tenant, "err", err)
	}
}

// bundle collects the outputs and writes the run's bundle. A failure here
// loses no result: the run happened, and the result says why it has no
// bundle.
func (r *execution) bundle(ws *taskdir.Dir, st *streams, res *run.Result) {
	s := r.ex
	sources := r.inputSources(st)
	budget := s.cfg.Output.Bytes
	if s.store != nil {
		used := int64(manifestSlack)
		for _, src := range sources {
			used += src.Size
		}
		budget = min(budget, s.store.MaxBundleBytes()-used)
	}
	found, err := taskdir.Collect(ws.Path(taskdir.Workspace), s.cfg.Output, max(budget, 0), r.unchanged)
	if err != nil {
		res.BundleError = "collect outputs: " + err.Error()
		s.log.Error("collect outputs", "run", r.id, "tenant", r.tenant, "err", err)
		return
	}
	defer found.Close()
	res.Files = found.Outputs
	if s.store == nil {
		return
	}
	m := r.manifest(res, found)
	write := s.store.Write
	if r.session != nil {
		// A session's call answers in milliseconds: its bundle is made
		// durable just after (see artifacts.Store.WriteLater).
		write = s.store.WriteLater
	}
	digest, _, err := write(m, append(sources, found.Sources...))
	if err != nil {
		res.BundleError = err.Error()
		s.log.Error("write bundle", "run", r.id, "tenant", r.tenant, "err", err)
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
func (r *execution) inputSources(st *streams) []artifacts.Source {
	var out []artifacts.Source
	if p := r.req.Program; p != nil {
		out = append(out, artifacts.BytesSource(artifacts.DirCode+"/"+r.plan.language.File, []byte(p.Code), false))
	}
	for _, f := range r.req.Options.Files {
		out = append(out, artifacts.BytesSource(artifacts.DirInput+"/"+f.Path, f.Content, f.Executable))
	}
	if r.req.Options.Stdin != nil {
		out = append(out, artifacts.BytesSource(artifacts.EntryStdin, r.req.Options.Stdin, false))
	}
	out = append(out, r.extraSources...)
	if r.tools != nil && (len(r.plan.tools) > 0 || len(r.tools.Calls()) > 0) {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		for _, c := range r.tools.Calls() {
			_ = enc.Encode(c)
		}
		out = append(out, artifacts.BytesSource(artifacts.EntryToolCalls, b.Bytes(), false))
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
func (r *execution) manifest(res *run.Result, found *taskdir.Collected) *artifacts.Manifest {
	o := r.req.Options
	req := artifacts.Request{
		Argv: r.plan.argv, Network: string(r.plan.network.Mode), Mounts: append([]string{}, o.Mounts...),
		Env: map[string]string{}, Workdir: r.plan.workdir, Seed: r.plan.seed, Stdin: o.Stdin != nil,
		Files:  []artifacts.InputFile{},
		Limits: res.Limits, Prestarted: r.ranIn != nil, Preimported: r.preimported(), Tools: r.plan.tools,
	}
	if pol := r.plan.network; pol.Mode == netpolicy.AllowList {
		req.NetworkPolicy, req.NetworkRules, req.NetworkCaps = pol.Name, o.Network.Rules, &pol.Caps
	}
	if r.req.Program != nil {
		req.Kind, req.Language = "code", r.req.Program.Language
	} else {
		req.Kind, req.Shell = "command", r.req.Command.Shell
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
		network = &artifacts.Network{Rules: r.plan.network.Rules, Summary: *res.Network}
	}
	return &artifacts.Manifest{
		Reproducible: artifacts.Reproducible{
			Request: req, Image: r.imageName, ImageDigest: r.image.ID, ImageRecipe: r.image.Labels[images.LabelRecipe],
			ImagePackages: r.ex.packagesOf(r.imageName, r.image.ID),
			Runtime:       artifacts.Runtime{Name: r.ociRuntime.Name, Version: r.ociRuntime.Version},
			Backend:       r.info.Backend, Seccomp: r.ociRuntime.Seccomp, Environment: sortedEnv(vars), Determinism: determinism,
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
			RunID: r.id, Tenant: r.tenant, Instance: r.ex.cfg.Instance, Version: r.ex.cfg.Version,
			StartedAt: r.startedAt.UTC(), FinishedAt: r.finishedAt.UTC(),
			DurationMs: float64(res.Duration) / float64(time.Millisecond), QueuedMs: float64(r.queued) / float64(time.Millisecond),
			PeakMemoryBytes: res.PeakMemoryBytes, Message: res.Message, Start: string(res.Start), ColdReason: res.ColdReason,
			Network: network, Session: r.session,
		},
	}
}

// preimported are the modules the program's pre-started interpreter had
// loaded.
func (r *execution) preimported() []string {
	if r.ranIn == nil {
		return nil
	}
	return r.ranIn.Modules
}
