package exec

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/taskdir"
)

// Call is a call of a session: its program runs in the session's
// container, started by the session's init; the container stays.
type Call struct {
	Session *Session
	// Seq is the call's place in the session (1 for the first), and
	// ParentBundle the bundle of the call before it.
	Seq          int64
	ParentBundle string

	before      taskdir.Snapshot
	uploads     []artifacts.Upload
	dropUploads func()
	events      []artifacts.SessionEvent
	// networkChanges are the session's policy changes since the last call.
	networkChanges []artifacts.NetworkChange
}

// Broken marks the error of a call whose session's container failed: the
// session ends with it.
type Broken struct{ error }

func (b Broken) Unwrap() error { return b.error }

var _ Source = (*Call)(nil)

// folders writes the call's program into the session's code folder, makes
// its working folder, and takes the uploads since the last call into its
// bundle and the workspace it starts from.
func (c *Call) folders(r *Run) (*taskdir.Dir, error) {
	sess := c.Session
	ws := sess.ws
	var code []taskdir.File
	if r.Request.Program != nil && !sess.InKernel(r.Request) {
		code = []taskdir.File{{Path: r.Plan.Language.File, Content: []byte(r.Request.Program.Code)}}
	}
	if err := ws.WriteFiles(taskdir.Code, code); err != nil {
		return nil, err
	}
	if err := ws.MakeWorkdir(inWorkspace(r.Plan.Workdir)); err != nil {
		return nil, err
	}
	c.removeStreams()
	c.before = sess.workspace
	var sources []artifacts.Source
	c.uploads, sources, c.dropUploads = sess.takeUploads()
	c.networkChanges = sess.takeNetworkChanges()
	var spawned bool
	c.events, spawned = sess.takeEvents()
	if len(c.uploads) > 0 || spawned {
		// The workspace the call starts from holds the uploads, and what
		// background processes wrote.
		var err error
		if c.before, err = taskdir.TakeSnapshot(ws.Path(taskdir.Workspace), c.before, r.ex.cfg.Output); err != nil {
			return nil, fmt.Errorf("read the workspace: %w", err)
		}
	}
	r.extraSources = sources
	if c.Seq == 1 {
		// The first call's bundle says how the session was made.
		for _, f := range sess.createFiles {
			r.extraSources = append(r.extraSources, artifacts.BytesSource(artifacts.DirInput+"/"+f.Path, f.Content, f.Executable))
		}
	}
	return ws, nil
}

// release drops the call's stream files and the uploads' copies, once the
// streams are closed.
func (c *Call) release(*Run) {
	c.removeStreams()
	if c.dropUploads != nil {
		c.dropUploads()
	}
}

func (c *Call) removeStreams() {
	for _, name := range []string{run.Stdout.String(), run.Stderr.String()} {
		_ = os.Remove(c.Session.ws.Path(name))
	}
}

// channel is every call's: one that names no tools finds each refused,
// recorded in its bundle.
func (c *Call) channel(*Run) bool { return true }

// start hands the call to the session's init.
func (c *Call) start(r *Run, _ *taskdir.Dir, st *streams) (program, *run.Result, error) {
	sess := c.Session
	calls, err := sess.Calls()
	if err != nil {
		return nil, nil, err
	}
	call := runtime.Call{
		Argv: r.Plan.Argv, Env: SortedEnv(r.envVars()), WorkingDir: r.Plan.Workdir,
		Stdin: r.Request.Options.Stdin, Timeout: r.Plan.Limits.Timeout, Stdout: st.stdout, Stderr: st.stderr,
		Tools: r.tools,
	}
	if sess.InKernel(r.Request) {
		call = sess.kernelCall(r.Request.Program.Code, call.Env, call.WorkingDir)
		call.Timeout, call.Stdout, call.Stderr, call.Tools = r.Plan.Limits.Timeout, st.stdout, st.stderr, r.tools
	}
	if b := sess.binding; b != nil {
		// The session's binding outlives the call: the call follows and
		// records its share of the log, from its start to its end.
		b.Follow(r.followNetwork)
		r.netRules = sess.Plan.Network.Rules
		r.endNetwork = func() {
			b.Follow(nil)
			sum := r.netCall.Summary()
			r.network = &sum
		}
	}
	r.startedAt = time.Now()
	// Cancellation and an output flood interrupt the call; the session's
	// container stays.
	ctx, cancel := context.WithCancel(context.Background())
	p := &callProgram{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.exit, p.err = calls.Call(ctx, call)
	}()
	return p, nil, nil
}

// callProgram is a call under way in the session's init.
type callProgram struct {
	cancel context.CancelFunc
	done   chan struct{}
	exit   runtime.CallExit
	err    error
}

func (p *callProgram) wait() (ended, error) {
	<-p.done
	p.cancel()
	if p.err != nil {
		return ended{}, Broken{p.err}
	}
	finished := p.exit.FinishedAt
	if finished.Before(p.exit.StartedAt) {
		finished = p.exit.StartedAt
	}
	exit := runtime.Exit{Code: p.exit.Code, OOMKilled: p.exit.OOMKilled, PeakMemoryBytes: p.exit.PeakMemoryBytes, StartedAt: p.exit.StartedAt, FinishedAt: finished}
	return ended{Exit: exit, call: &p.exit}, nil
}

// stop interrupts the call: the init ends it, and the session goes on.
func (p *callProgram) stop(context.Context) error {
	p.cancel()
	return nil
}

// timeout is none of the watcher's: the session's init interrupts a call
// at its timeout.
func (p *callProgram) timeout() time.Duration { return 0 }

// classify says how a call ended, as the session's init told: a call
// is interrupted, not killed, and its container stays unless it ended.
func (c *Call) classify(r *Run, end ended, st *streams) run.Result {
	exit := *end.call
	lim := r.Plan.Limits
	res := r.result(run.StatusOK, exit.Code, 0, "exited with code 0", runtime.Exit{PeakMemoryBytes: exit.PeakMemoryBytes})
	if exit.Reply != nil {
		r.kernel = c.kernelReply(exit.Reply)
		res.Kernel = r.kernel
	}
	floodAt := st.floodAt(r.flooded)
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
		res.Status, res.Signal, res.Message = run.StatusKernelDied, sig, fmt.Sprintf("%s; the next %s call starts a new one", why, r.Plan.Language.Name)
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
	res.Start = run.StartWarm
	return res
}

// kernelReply reads the kernel's reply, which the session's code could
// have written: what does not parse is no reply, and display files are
// looked at from the host side, as outputs are.
func (c *Call) kernelReply(b []byte) *artifacts.KernelReply {
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
	root, rootErr := c.Session.ws.OpenWorkspace()
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

// collect takes the workspace as the call left it: the bundle records
// the call's place in the session and only what the call changed.
func (c *Call) collect(r *Run, ws *taskdir.Dir, res *run.Result) bool {
	sess := c.Session
	after, err := taskdir.TakeSnapshot(ws.Path(taskdir.Workspace), c.before, r.ex.cfg.Output)
	if err != nil {
		res.BundleError = "read the workspace: " + err.Error()
		return false
	}
	sess.workspace = after
	r.session = &artifacts.Session{
		ID: sess.ID, Seq: c.Seq, ParentBundle: c.ParentBundle,
		WorkspaceBefore: c.before.Digest, WorkspaceAfter: after.Digest, Uploads: c.uploads, Events: c.events,
		NetworkChanges: c.networkChanges,
	}
	if c.Seq == 1 {
		create := sess.Create
		r.session.Create = &create
	}
	before := c.before
	r.unchanged = func(p string) bool { return after.UnchangedSince(before, p) }
	res.Session = r.session
	res.Network = r.network
	return true
}
