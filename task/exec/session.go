package exec

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task/pool"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/taskdir"
)

// The kernels of sessions, started by the session container's init on
// the first call in their language.
var (
	//go:embed kernel.py
	pythonKernel string
	//go:embed kernel.js
	javascriptKernel string
)

// kernel is how a language's kernel starts: argv, with its script in the
// environment variable SANDBOXD_KERNEL, which the kernel drops, rather
// than in argv, where every ps would print it.
type kernel struct {
	argv   []string
	script string
}

// kernels are the languages whose code runs in a session's kernel, one
// process that keeps its variables from call to call; code in other
// languages runs as a command of the session.
var kernels = map[string]kernel{
	"python":     {[]string{"python3", "-c", "import os; exec(os.environ.pop('SANDBOXD_KERNEL'))", "sandboxd-kernel"}, pythonKernel},
	"javascript": {[]string{"node", "-e", "const k = process.env.SANDBOXD_KERNEL; delete process.env.SANDBOXD_KERNEL; eval(k)"}, javascriptKernel},
}

// HasKernel says whether a session of language keeps its code's state in a
// kernel.
func HasKernel(language string) bool {
	_, ok := kernels[language]
	return ok
}

// Session is the container half of a session: its container, folders,
// network binding and calls, the workspace as its last call left it, and
// the files uploaded since. The façade keeps its record, expiry and turn.
type Session struct {
	ex *Executor
	// ID is the session's, and its container's run id.
	ID         string
	Plan       Plan
	Image      runtime.Image
	ImageName  string
	Info       runtime.Info
	OCIRuntime runtime.OCIRuntime
	// Env is the session's own variables, under every call's.
	Env map[string]string
	// Create is how the session was made, and createFiles its input
	// files: the first call's bundle records both.
	Create      artifacts.SessionCreate
	createFiles []run.File

	ws      *taskdir.Dir
	binding netpolicy.Binding
	// ctr and calls are the session's container, none while it is
	// paused; ctrMu guards them, as a background process may start while
	// a pause takes them away.
	ctrMu sync.Mutex
	ctr   runtime.Prepared
	calls runtime.Session

	// workspace is /workspace as the last call left it; uploads are the
	// files written into it since.
	workspace taskdir.Snapshot
	uploads   []upload

	// events happened since the last call (see artifacts.SessionEvent);
	// spawned says a background process ever ran, which may have changed
	// the workspace since the last call.
	eventsMu sync.Mutex
	events   []artifacts.SessionEvent
	spawned  bool
	// networkChanges are the policy changes since the last call, which
	// the next call's bundle records.
	networkChanges []artifacts.NetworkChange
}

// SessionSpec is a session to open: its id, what it runs on, and the
// pooled container it claimed (nil: one is made for it).
type SessionSpec struct {
	ID         string
	Plan       Plan
	Image      runtime.Image
	ImageName  string
	Info       runtime.Info
	OCIRuntime runtime.OCIRuntime
	Language   string
	Env        map[string]string
	Files      []run.File
	// Network is what the request asked for, which the first call's
	// bundle records for replay; Plan.Network is what it resolved to.
	Network netpolicy.Request
	Warm    *pool.Warm
}

// OpenSession makes spec's container a session's: its folders filled, its
// policy bound, its calls open. On error nothing of it is left.
func (e *Executor) OpenSession(ctx context.Context, spec SessionSpec) (_ *Session, err error) {
	p := spec.Plan
	sess := &Session{ex: e, ID: spec.ID, Plan: p, Image: spec.Image, ImageName: spec.ImageName, Info: spec.Info, OCIRuntime: spec.OCIRuntime,
		Env: spec.Env, Create: artifacts.SessionCreate{Language: spec.Language, Env: spec.Env}, createFiles: spec.Files}
	for _, f := range spec.Files {
		sess.Create.Files = append(sess.Create.Files, artifacts.InputFile{Path: f.Path, Executable: f.Executable})
	}
	if n := spec.Network; n.Mode == netpolicy.AllowList {
		sess.Create.Network = &artifacts.NetworkChange{Mode: string(n.Mode), Policy: n.Policy, Rules: n.Rules, Caps: n.Caps, Secrets: n.Secrets}
	}
	defer func() {
		if err != nil {
			sess.Close()
		}
	}()
	egress := p.Network.Mode == netpolicy.AllowList
	if w := spec.Warm; w != nil {
		sess.ws, sess.ctr = w.Dir, w.Container
	} else {
		if sess.ws, err = e.NewFolders(spec.ID, p.Limits.DiskBytes, egress); err != nil {
			return nil, err
		}
		cs := sess.containerSpec()
		prep, ok := e.cfg.Runtime.(runtime.Preparer)
		if !ok {
			return nil, errdefs.ErrFailedPrecondition.WithMessage("this backend cannot hold sessions")
		}
		if sess.ctr, err = prep.Prepare(ctx, cs); err != nil {
			return nil, err
		}
	}
	host, ok := sess.ctr.(runtime.SessionHost)
	if !ok {
		return nil, errdefs.ErrFailedPrecondition.WithMessage("this backend's containers cannot hold sessions")
	}
	if err := sess.ws.WriteFiles(taskdir.Input, DirFiles(spec.Files)); err != nil {
		return nil, err
	}
	if err := sess.ws.WriteFiles(taskdir.Code, ToolLibrary()); err != nil {
		return nil, err
	}
	if err := sess.ws.MakeWorkdir(inWorkspace(p.Workdir)); err != nil {
		return nil, err
	}
	if egress {
		if sess.binding, err = e.cfg.Egress.Bind(sess.ws.Egress, p.Network); err != nil {
			return nil, fmt.Errorf("bind the network policy: %w", err)
		}
	}
	if sess.calls, err = host.OpenSession(ctx, e.Resources(p.Limits)); err != nil {
		return nil, err
	}
	if sess.workspace, err = taskdir.TakeSnapshot(sess.ws.Path(taskdir.Workspace), taskdir.Snapshot{}, e.cfg.Output); err != nil {
		return nil, err
	}
	return sess, nil
}

// SetNetwork puts p, resolved from what the owner asked, in force for the
// session's connections from now on; the next call's bundle records the
// change. The caller holds the session's turn.
func (sess *Session) SetNetwork(p netpolicy.Policy, asked netpolicy.Request) error {
	if sess.binding == nil {
		return errdefs.ErrFailedPrecondition.WithMessage("network: the session was created without network (mode none), so its container has no link to the egress gateway: create it with an allow-list to change its policy")
	}
	if err := sess.binding.Update(p); err != nil {
		return err
	}
	sess.Plan.Network = p
	sess.networkChanges = append(sess.networkChanges, artifacts.NetworkChange{Time: time.Now().UTC(), Mode: string(asked.Mode),
		Policy: asked.Policy, Rules: asked.Rules, Caps: asked.Caps, Secrets: asked.Secrets})
	return nil
}

// takeNetworkChanges hands the policy changes since the last call to the
// next call's bundle.
func (sess *Session) takeNetworkChanges() []artifacts.NetworkChange {
	out := sess.networkChanges
	sess.networkChanges = nil
	return out
}

// Close removes what a session holds: container, network binding,
// folders.
func (sess *Session) Close() {
	log := sess.ex.cfg.Log
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	sess.ctrMu.Lock()
	defer sess.ctrMu.Unlock()
	if sess.ctr != nil {
		if err := sess.ctr.Remove(ctx); err != nil {
			log.Error("remove a session's container", "session", sess.ID, "err", err)
		}
	}
	if sess.binding != nil {
		sess.binding.End()
	}
	if sess.ws != nil {
		if err := sess.ws.Remove(); err != nil {
			log.Error("remove a session's folder", "session", sess.ID, "err", err)
		}
	}
}

// StartKernel starts the kernel of the session's language, which the
// session's first call would otherwise wait for.
func (sess *Session) StartKernel(ctx context.Context) error {
	call := sess.kernelCall("", SortedEnv(sess.ex.Env(sess.Image, sess.Plan, sess.Env)), sess.Plan.Workdir)
	call.Stdout, call.Stderr = io.Discard, io.Discard
	calls, err := sess.Calls()
	if err != nil {
		return err
	}
	_, err = calls.Call(ctx, call)
	return err
}

// kernelCall is a call of code in the session's kernel, which the init
// starts when none runs.
func (sess *Session) kernelCall(code string, env []string, workdir string) runtime.Call {
	k := kernels[sess.Plan.Language.Name]
	return runtime.Call{
		Argv: k.argv, Env: append(slices.Clip(env), "SANDBOXD_KERNEL="+k.script), WorkingDir: workdir,
		Kernel: true, Code: code,
	}
}

// InKernel says whether a request's program runs in the session's kernel.
func (sess *Session) InKernel(req run.Request) bool {
	return req.Program != nil && req.Program.Language == sess.Plan.Language.Name && HasKernel(req.Program.Language)
}

// Spawn starts a background process in the session's container, with the
// session's environment under env, in workdir, with a terminal of that
// size when not nil (see runtime.ProcessHost).
// It has no tool channel: what it asked, no call would answer.
func (sess *Session) Spawn(ctx context.Context, argv []string, env map[string]string, workdir string, terminal *runtime.WindowSize, stdout, stderr io.Writer) (runtime.Process, error) {
	calls, err := sess.Calls()
	if err != nil {
		return nil, err
	}
	host, ok := calls.(runtime.ProcessHost)
	if !ok {
		return nil, errdefs.ErrFailedPrecondition.WithMessage("this backend's sessions cannot run background processes")
	}
	vars := maps.Clone(sess.Env)
	if vars == nil {
		vars = map[string]string{}
	}
	maps.Copy(vars, env)
	p := sess.Plan
	p.Tools, p.Channel = nil, false
	sess.eventsMu.Lock()
	sess.spawned = true
	sess.eventsMu.Unlock()
	return host.Spawn(ctx, runtime.ProcessSpec{
		Argv: argv, Env: SortedEnv(sess.ex.Env(sess.Image, p, vars)), WorkingDir: workdir, Stdout: stdout, Stderr: stderr, Terminal: terminal,
	})
}

// DialPort connects to port of the session container's loopback (see
// runtime.PortDialer).
func (sess *Session) DialPort(ctx context.Context, port uint16) (net.Conn, error) {
	calls, err := sess.Calls()
	if err != nil {
		return nil, err
	}
	d, ok := calls.(runtime.PortDialer)
	if !ok {
		return nil, errdefs.ErrFailedPrecondition.WithMessage("this backend's sessions cannot reach their ports")
	}
	return d.DialPort(ctx, port)
}

// Record keeps an event for the next call's bundle.
func (sess *Session) Record(e artifacts.SessionEvent) {
	sess.eventsMu.Lock()
	defer sess.eventsMu.Unlock()
	sess.events = append(sess.events, e)
}

// takeEvents hands the events since the last call to the next call's
// bundle, and says whether a background process ever ran.
func (sess *Session) takeEvents() ([]artifacts.SessionEvent, bool) {
	sess.eventsMu.Lock()
	defer sess.eventsMu.Unlock()
	e := sess.events
	sess.events = nil
	return e, sess.spawned
}

// Pause saves the session's container, memory and all, to dir and
// removes it; its folders stay, for Resume. It returns the background
// processes the checkpoint holds. A session with a link to the egress
// gateway is refused: its restore would need its link, address and CA
// made again.
func (sess *Session) Pause(ctx context.Context, dir string) ([]runtime.SavedProcess, error) {
	sess.ctrMu.Lock()
	defer sess.ctrMu.Unlock()
	if sess.calls == nil {
		return nil, errPaused
	}
	cp, ok := sess.calls.(runtime.Checkpointer)
	restorer, rok := sess.ex.cfg.Runtime.(runtime.Restorer)
	if !ok || !rok {
		return nil, errdefs.ErrFailedPrecondition.WithMessage("this backend's sessions cannot be paused: the direct backend's under gVisor can")
	}
	if err := restorer.Checkpoints(sess.OCIRuntime.Name); err != nil {
		return nil, fmt.Errorf("the session cannot be paused: %w", err)
	}
	if sess.binding != nil {
		return nil, errdefs.ErrFailedPrecondition.WithMessage("a session with an allow-listed network cannot be paused yet: its link to the egress gateway is not restored")
	}
	saved, err := cp.Checkpoint(ctx, dir, false)
	if err != nil {
		return nil, err
	}
	rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := sess.ctr.Remove(rmCtx); err != nil {
		sess.ex.cfg.Log.Warn("remove a paused session's container", "session", sess.ID, "err", err)
	}
	sess.ctr, sess.calls = nil, nil
	return saved, nil
}

// Resume restores the checkpoint in dir, which Pause made, into a new
// container on the session's folders; procs gives the writers of the
// background processes it holds.
func (sess *Session) Resume(ctx context.Context, dir string, procs map[uint32]runtime.ProcessSpec) (map[uint32]runtime.Process, error) {
	restorer, ok := sess.ex.cfg.Runtime.(runtime.Restorer)
	if !ok {
		return nil, errdefs.ErrFailedPrecondition.WithMessage("this backend cannot restore sessions")
	}
	sess.ctrMu.Lock()
	defer sess.ctrMu.Unlock()
	if sess.calls != nil {
		return nil, errdefs.ErrFailedPrecondition.WithMessage("the session is not paused")
	}
	cs := sess.containerSpec()
	r, err := restorer.Restore(ctx, cs, dir, procs)
	if err != nil {
		return nil, err
	}
	ctr, ok := r.Container.(runtime.Prepared)
	if !ok {
		r.Container.Remove(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("the restored container of %s is not a session's", sess.ID)
	}
	sess.ctr, sess.calls = ctr, r.Session
	return r.Processes, nil
}

// errPaused is what the session's container's users get while it is
// paused.
var errPaused = errdefs.ErrFailedPrecondition.WithMessage("the session is paused: resume it first")

// Calls is the session's container's calls, or errPaused.
func (sess *Session) Calls() (runtime.Session, error) {
	sess.ctrMu.Lock()
	defer sess.ctrMu.Unlock()
	if sess.calls == nil {
		return nil, errPaused
	}
	return sess.calls, nil
}

// containerSpec is the session's container made for it, as its creation
// prepares it and its resume restores it.
func (sess *Session) containerSpec() runtime.Spec {
	p := sess.Plan
	cs := sess.ex.ContainerSpec(sess.ID, sess.Image.ID, sess.OCIRuntime.Name, sess.ws, p.Limits)
	cs.Mounts = append(cs.Mounts, p.Mounts...)
	cs.Env, cs.WorkingDir = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}, run.WorkspaceDir
	return cs
}
