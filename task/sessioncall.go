package task

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/taskdir"
	"github.com/sandboxd/sandboxd/task/tools"
)

// runInSession runs a task as the next call of its session: in the
// session's container, after the session's running call, with an
// admission slot like any run, and leaves a bundle chained to the call
// before.
func (s *Service) runInSession(ctx context.Context, req run.Request, obs run.Observer) (run.Result, error) {
	if err := req.Validate(s.cfg.Bounds); err != nil {
		return run.Result{}, err
	}
	if err := checkCallOptions(req.Options); err != nil {
		return run.Result{}, err
	}
	sess, err := s.liveSession(ctx, req.Options.SessionID)
	if err != nil {
		return run.Result{}, err
	}
	p := sess.plan
	if o := req.Options.Limits; o.Timeout != 0 || o.StdoutBytes != 0 || o.StderrBytes != 0 {
		l, err := s.cfg.Limits.Resolve(limits.Limits{Timeout: o.Timeout, StdoutBytes: o.StdoutBytes, StderrBytes: o.StderrBytes})
		if err != nil {
			return run.Result{}, err
		}
		p.limits.Timeout, p.limits.StdoutBytes, p.limits.StderrBytes = l.Timeout, l.StdoutBytes, l.StderrBytes
	}
	if req.Options.Workdir != "" {
		p.workdir, _ = run.ResolveWorkdir(req.Options.Workdir)
	}
	if err := s.resolveTools(&p, req.Options); err != nil {
		return run.Result{}, err
	}
	p.tools = append(p.tools, tools.CallerToolNames(req.Caller.Tools)...)
	switch {
	case sess.inKernel(req):
		p.argv = nil
	default:
		// The image stays the session's: a call's language picks only its
		// command, as that image runs it.
		image := p.image
		in := req
		in.Options.Image = image
		if err := resolveProgram(s.Catalog(), &p, in); err != nil {
			return run.Result{}, err
		}
		if err := notCompiled(p.language); err != nil {
			return run.Result{}, err
		}
		p.image = image
	}
	if sess.inKernel(req) && req.Options.Stdin != nil {
		return run.Result{}, run.Invalid("options.stdin", "%s code in a %s session runs in its kernel, which has no stdin", req.Program.Language, req.Program.Language)
	}
	if sess.inKernel(req) && len(req.Options.Env) > 0 {
		return run.Result{}, run.Invalid("options.env", "%s code in a %s session runs in its kernel, whose environment is the session's: set env in CreateSession, or change it in the code", req.Program.Language, req.Program.Language)
	}

	return s.pipeline(ctx, req, p, sess.info.Tenant, obs, inSession{s, sess})
}

// sessionBroken marks the error of a call whose session's container
// failed: the session ends with it.
type sessionBroken struct{ error }

func (b sessionBroken) Unwrap() error { return b.error }

func mergeEnv(base, over map[string]string) map[string]string {
	out := make(map[string]string, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

// executeCall runs the call in the session's container and writes its
// bundle; the stream files it made are removed before it returns.
func (r *execution) executeCall(sess *liveSession) (run.Result, error) {
	ws := sess.ws
	var code []taskdir.File
	if r.req.Program != nil && !sess.inKernel(r.req) {
		code = []taskdir.File{{Path: r.plan.language.File, Content: []byte(r.req.Program.Code)}}
	}
	if err := ws.WriteFiles(taskdir.Code, code); err != nil {
		return run.Result{}, err
	}
	if err := ws.MakeWorkdir(inWorkspace(r.plan.workdir)); err != nil {
		return run.Result{}, err
	}
	for _, name := range []string{run.Stdout.String(), run.Stderr.String()} {
		_ = os.Remove(ws.Path(name))
	}
	st, err := r.openStreams(ws)
	if err != nil {
		return run.Result{}, err
	}
	defer func() {
		st.close()
		for _, name := range []string{run.Stdout.String(), run.Stderr.String()} {
			_ = os.Remove(ws.Path(name))
		}
	}()

	before := sess.workspace
	uploads, uploadSources, dropUploads := sess.takeUploads()
	defer dropUploads()
	if len(uploads) > 0 {
		// The workspace the call starts from holds the uploads.
		var err error
		if before, err = taskdir.TakeSnapshot(ws.Path(taskdir.Workspace), before, r.ex.cfg.Output); err != nil {
			return run.Result{}, fmt.Errorf("read the workspace: %w", err)
		}
	}
	r.extraSources = uploadSources
	var create *artifacts.SessionCreate
	if sess.info.Calls == 0 {
		// The first call's bundle says how the session was made.
		o := sess.req.Options
		create = &artifacts.SessionCreate{Language: sess.req.Language, Env: o.Env}
		for _, f := range o.Files {
			create.Files = append(create.Files, artifacts.InputFile{Path: f.Path, Executable: f.Executable})
			r.extraSources = append(r.extraSources, artifacts.BytesSource(artifacts.DirInput+"/"+f.Path, f.Content, f.Executable))
		}
	}
	// Every call's program has a tool channel; one that names no tools
	// finds each refused, recorded in its bundle.
	r.tools = r.ex.toolRun(r)
	call := runtime.Call{
		Argv: r.plan.argv, Env: sortedEnv(r.envVars()), WorkingDir: r.plan.workdir,
		Stdin: r.req.Options.Stdin, Timeout: r.plan.limits.Timeout, Stdout: st.stdout, Stderr: st.stderr,
		Tools: r.tools,
	}
	if sess.inKernel(r.req) {
		call = sess.kernelCall(r.req.Program.Code, call.Env, call.WorkingDir)
		call.Timeout, call.Stdout, call.Stderr, call.Tools = r.plan.limits.Timeout, st.stdout, st.stderr, r.tools
	}
	r.startedAt = time.Now()
	started := run.Started{
		RunID: r.id, Limits: r.plan.limits, Image: r.imageName, ImageDigest: r.image.ID,
		Runtime: r.ociRuntime.Name, RuntimeVersion: r.ociRuntime.Version, Backend: r.info.Backend,
		StartedAt: r.startedAt.UTC(),
	}
	r.runs.Started(r.id, started)
	r.emit.Started(started)

	// Cancellation and an output flood interrupt the call; the session's
	// container stays.
	callCtx, stop := context.WithCancel(context.Background())
	var once sync.Once
	go func() {
		select {
		case <-r.ctx.Done():
			r.kill(killedCancelled, nil)
		case <-r.killed:
		case <-callCtx.Done():
			return
		}
		once.Do(stop)
	}()
	exit, err := sess.calls.Call(callCtx, call)
	once.Do(stop)
	r.tools.Settled()
	if err != nil {
		return run.Result{}, sessionBroken{err}
	}
	r.killOnce.Do(func() {})
	r.startedAt, r.finishedAt = exit.StartedAt, exit.FinishedAt
	if r.finishedAt.Before(r.startedAt) {
		r.finishedAt = r.startedAt
	}
	res := r.callResult(exit, st)
	res.Start = run.StartWarm
	res.ToolCalls = r.tools.Made()

	after, err := taskdir.TakeSnapshot(ws.Path(taskdir.Workspace), before, r.ex.cfg.Output)
	if err != nil {
		res.BundleError = "read the workspace: " + err.Error()
		return res, nil
	}
	sess.workspace = after
	r.session = &artifacts.Session{
		ID: sess.info.ID, Seq: sess.info.Calls + 1, ParentBundle: sess.info.LastBundle,
		WorkspaceBefore: before.Digest, WorkspaceAfter: after.Digest, Uploads: uploads, Create: create,
	}
	r.unchanged = func(p string) bool { return after.UnchangedSince(before, p) }
	res.Session = r.session
	r.bundle(ws, st, &res)
	return res, nil
}

// callResult classifies how a call ended.
func (r *execution) callResult(exit runtime.CallExit, st *streams) run.Result {
	lim := r.plan.limits
	res := r.result(run.StatusOK, exit.Code, 0, "exited with code 0", runtime.Exit{PeakMemoryBytes: exit.PeakMemoryBytes})
	if exit.Reply != nil {
		r.kernel = r.kernelReply(exit.Reply)
		res.Kernel = r.kernel
	}
	floodAt := st.stdout.KillAt
	if r.flooded == run.Stderr {
		floodAt = st.stderr.KillAt
	}
	sig := 0
	if exit.Code > 128 && exit.Code <= 128+64 {
		sig = exit.Code - 128
	}
	switch {
	case exit.ContainerExited:
		r.containerExited = true
		res.Status, res.Signal, res.Message = run.StatusRuntimeError, 9, "the session's container ended during the call; the session has ended"
		if exit.OOMKilled {
			// Under gVisor the host's OOM killer ends the whole sandbox,
			// where under runc it kills one process (docs/runtimes.md).
			res.Status, res.Message = run.StatusOOMKilled, fmt.Sprintf("the session's container was killed for lack of memory at the %s limit; the session has ended", bytesString(lim.MemoryBytes))
		}
	case exit.KernelDied:
		why := "the kernel ended"
		switch {
		case exit.OOMKilled:
			why = fmt.Sprintf("the kernel was killed for lack of memory at the %s limit", bytesString(lim.MemoryBytes))
		case exit.TimedOut || exit.Interrupted:
			why = "the kernel did not stop when interrupted and was killed"
		}
		res.Status, res.Signal, res.Message = run.StatusKernelDied, sig, fmt.Sprintf("%s; the next %s call starts a new one", why, r.plan.language.Name)
	case r.reason == killedOutput:
		res.Status, res.Signal, res.Message = run.StatusOutputLimit, sig, fmt.Sprintf("interrupted when %s passed %s", r.flooded, bytesString(floodAt))
	case exit.Interrupted:
		res.Status, res.Signal, res.Message = run.StatusCancelled, sig, "cancelled: "+context.Cause(r.ctx).Error()
	case exit.TimedOut:
		res.Status, res.Signal, res.Message = run.StatusTimeout, sig, fmt.Sprintf("interrupted after the %v timeout", lim.Timeout)
	default:
		status, msg, sig := outcome(runtime.Exit{Code: exit.Code, OOMKilled: exit.OOMKilled}, notKilled, "", r.flooded, floodAt, lim)
		res.Status, res.Message, res.Signal = status, msg, sig
		if r.kernel != nil && r.kernel.Error != nil {
			res.Message = "raised " + r.kernel.Error.Name
		}
	}
	res.StdoutTotal, res.StdoutTruncated = st.stdout.Counts()
	res.StderrTotal, res.StderrTruncated = st.stderr.Counts()
	return res
}

// kernelReply reads the kernel's reply, which the session's code could
// have written: what does not parse is no reply, and display files are
// looked at from the host side, as outputs are.
func (r *execution) kernelReply(b []byte) *artifacts.KernelReply {
	var reply struct {
		ExecutionCount int64                  `json:"execution_count"`
		Result         map[string]string      `json:"result"`
		Error          *artifacts.KernelError `json:"error"`
		Displays       []struct {
			Data  map[string]string `json:"data"`
			Files map[string]string `json:"files"`
		} `json:"displays"`
	}
	if json.Unmarshal(b, &reply) != nil {
		return nil
	}
	k := &artifacts.KernelReply{ExecutionCount: reply.ExecutionCount, Result: reply.Result, Error: reply.Error}
	root, rootErr := r.ws.OpenWorkspace()
	if rootErr == nil {
		defer unix.Close(root)
	}
	for _, d := range reply.Displays {
		disp := artifacts.Display{Data: d.Data}
		for _, mime := range slices.Sorted(maps.Keys(d.Files)) {
			p := d.Files[mime]
			if rootErr != nil || run.CheckRelPath("display", p) != nil {
				continue
			}
			if size, sum, err := taskdir.HashFileAt(root, p); err == nil {
				disp.Files = append(disp.Files, artifacts.DisplayFile{MIME: mime, Path: p, SHA256: sum, Size: size})
			}
		}
		k.Displays = append(k.Displays, disp)
	}
	return k
}
