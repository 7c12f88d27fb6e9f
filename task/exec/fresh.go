package exec

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task/pool"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/taskdir"
)

// Fresh is a container of the run's own: the pooled one it claimed, or one
// made for it when Warm is nil (ColdReason says why). Either way the
// container serves this one run, and Cleanup removes it.
type Fresh struct {
	Warm       *pool.Warm
	ColdReason string
	// Interpreter is where the program may run.
	Interpreter Interpreter
}

// Interpreter is what a run's program runs in: whether a pooled
// container's interpreter may take it (InWarm), and whether a container
// made for it pre-starts one (InCold).
type Interpreter struct {
	// Prestart is the image's interpreter, with the modules it pre-loads
	// only when the program loads one of them.
	Prestart       *runtime.Prestart
	InWarm, InCold bool
}

// Preloads says the program is given an interpreter that loaded the
// image's modules: a pooled container's, or one started for it.
func (c Interpreter) Preloads() bool {
	return c.Prestart != nil && len(c.Prestart.Modules) > 0
}

var _ Source = (*Fresh)(nil)

// folders are the pooled container's, or new ones, filled with the
// request's files and program.
func (f *Fresh) folders(r *Run) (*taskdir.Dir, error) {
	if f.Warm != nil {
		r.ws, r.ctr = f.Warm.Dir, f.Warm.Container
	} else {
		ws, err := r.ex.NewFolders(r.ID, r.Plan.Limits.DiskBytes, r.Plan.Network.Mode == netpolicy.AllowList)
		if err != nil {
			return nil, err
		}
		r.ws = ws
	}
	ws := r.ws
	if err := ws.WriteFiles(taskdir.Input, DirFiles(r.Request.Options.Files)); err != nil {
		return nil, err
	}
	var code []taskdir.File
	if r.Request.Program != nil {
		code = []taskdir.File{{Path: r.Plan.Language.File, Content: []byte(r.Request.Program.Code)}}
	}
	if len(r.Plan.Tools) > 0 {
		code = append(code, ToolLibrary()...)
	}
	if err := ws.WriteFiles(taskdir.Code, code); err != nil {
		return nil, err
	}
	return ws, ws.MakeWorkdir(inWorkspace(r.Plan.Workdir))
}

func (f *Fresh) channel(r *Run) bool { return len(r.Plan.Tools) > 0 }

// start binds an allow-listed task's policy, then launches the task in
// its pooled container or starts a container for it. A pooled container
// that fails to take its task is removed, and the task gets a container of
// its own on the same folders.
func (f *Fresh) start(r *Run, ws *taskdir.Dir, st *streams) (program, *run.Result, error) {
	if r.Plan.Network.Mode == netpolicy.AllowList {
		// The gateway refuses everything from the container's address
		// until the policy is bound, and again once the program is done.
		b, err := r.ex.cfg.Egress.Bind(ws.Egress, r.Plan.Network)
		if err != nil {
			return nil, nil, fmt.Errorf("bind the network policy: %w", err)
		}
		b.Follow(r.followNetwork)
		r.netRules = r.Plan.Network.Rules
		r.endNetwork = func() {
			b.Follow(nil)
			sum := b.End()
			r.network = &sum
		}
	}
	ctr, err := f.startContainer(r, ws, st)
	if err != nil {
		r.startedAt, r.finishedAt = time.Now(), time.Now()
		switch {
		case errdefs.IsFailedPrecondition(err):
			// The backend refused this container: the task's failure.
			res := r.result(run.StatusRuntimeError, -1, 0, err.Error(), runtime.Exit{})
			return nil, &res, nil
		case r.ctx.Err() != nil:
			res := r.result(run.StatusCancelled, -1, 0, "cancelled before the program started: "+context.Cause(r.ctx).Error(), runtime.Exit{})
			return nil, &res, nil
		}
		return nil, nil, err
	}
	r.startedAt = time.Now()
	r.ctr = ctr
	return container{r, ctr}, nil, nil
}

func (f *Fresh) startContainer(r *Run, ws *taskdir.Dir, st *streams) (runtime.Container, error) {
	if w := f.Warm; w != nil {
		task := f.spec(r, ws, st).Task()
		task.Prestarted = f.Interpreter.InWarm && w.Prestart != nil
		err := w.Container.Launch(r.ctx, task)
		if err == nil {
			if task.Prestarted {
				r.ranIn = w.Prestart
			}
			return w.Container, nil
		}
		r.ex.cfg.Log.Warn("a pooled container failed to take its task; starting one for it", "run", r.ID, "tenant", r.Tenant, "err", err)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), cleanupTimeout)
		defer cancel()
		if err := w.Container.Remove(ctx); err != nil {
			r.ex.cfg.Log.Error("remove container", "run", r.ID, "tenant", r.Tenant, "err", err)
		}
		r.ctr = nil
		f.Warm, f.ColdReason = nil, "the pooled container failed: "+err.Error()
	}
	spec := f.spec(r, ws, st)
	if f.Interpreter.InCold {
		spec.Prestart, r.ranIn = f.Interpreter.Prestart, f.Interpreter.Prestart
	}
	return r.ex.cfg.Runtime.Start(r.ctx, spec)
}

// spec is the container of the run.
func (f *Fresh) spec(r *Run, ws *taskdir.Dir, st *streams) runtime.Spec {
	spec := r.ex.ContainerSpec(r.ID, r.Image.ID, r.OCIRuntime.Name, ws, r.Plan.Limits)
	spec.Mounts = append(spec.Mounts, r.Plan.Mounts...)
	spec.Argv, spec.Env, spec.WorkingDir = r.Plan.Argv, SortedEnv(r.envVars()), r.Plan.Workdir
	if r.Request.Program != nil {
		spec.Compile = r.Plan.Language.Compile
	}
	spec.Stdout, spec.Stderr = st.stdout, st.stderr
	if r.tools != nil {
		spec.Tools = r.tools
	}
	if r.Request.Options.Stdin != nil {
		spec.Stdin = bytes.NewReader(r.Request.Options.Stdin)
	}
	return spec
}

func (f *Fresh) classify(r *Run, end ended, st *streams) run.Result {
	cause := ""
	if r.reason == killedCancelled {
		cause = "cancelled: " + context.Cause(r.ctx).Error()
	}
	status, msg, sig := outcome(end.Exit, r.reason, cause, r.flooded, st.floodAt(r.flooded), r.Plan.Limits)
	res := r.result(status, end.Code, sig, msg, end.Exit)
	res.Start, res.ColdReason = run.StartCold, f.ColdReason
	if f.Warm != nil {
		res.Start = run.StartWarm
	}
	return res
}

func (f *Fresh) collect(r *Run, _ *taskdir.Dir, res *run.Result) bool {
	res.Network = r.network
	return true
}

// release leaves the container and folders to Cleanup.
func (f *Fresh) release(*Run) {}

// container is a run's container, waited for and killed whole.
type container struct {
	r   *Run
	ctr runtime.Container
}

func (c container) wait() (ended, error) {
	// The wait outlives the caller's cancellation: the watcher kills.
	ctx, cancel := context.WithCancel(context.WithoutCancel(c.r.ctx))
	defer cancel()
	exit, err := c.ctr.Wait(ctx)
	if err != nil {
		return ended{}, fmt.Errorf("run %s: %w", c.r.ID, err)
	}
	return ended{Exit: exit}, nil
}

func (c container) stop(ctx context.Context) error { return c.ctr.Kill(ctx) }

func (c container) timeout() time.Duration { return c.r.Plan.Limits.Timeout }
