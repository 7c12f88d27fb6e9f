package exec

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task/output"
	"github.com/sandboxd/sandboxd/task/registry"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/taskdir"
	"github.com/sandboxd/sandboxd/task/tools"
)

// Run is one run being executed: its job, the program its source started,
// its streams, why it was killed, and what its bundle records.
type Run struct {
	Job
	ex     *Executor
	runs   *registry.Runs
	live   *registry.Live
	ctx    context.Context
	cancel context.CancelCauseFunc
	emit   *output.Emitter // hands the observer its events, once the streams are open

	killOnce sync.Once
	reason   killReason
	flooded  run.Stream
	killed   chan struct{} // closed once the kill reason is set

	startedAt, finishedAt time.Time

	// ranIn, once the program started, is the pre-started interpreter it
	// runs in, or nil for a fresh one.
	ranIn *runtime.Prestart
	// endNetwork ends an allow-listed task's binding at the gateway and
	// keeps what its network did in network.
	endNetwork func()
	network    *netpolicy.Summary
	// netCall is what the run was told of its binding's log: a session's
	// binding outlives its calls, and each call has its share.
	netCall netpolicy.Excerpt
	// netRules are the rules the network ran with: a call's are its
	// session's.
	netRules []netpolicy.Rule
	// containerExited says a session's container ended during the call:
	// the session ends after it.
	containerExited bool

	// For a call of a session: its place, the files it left as they were,
	// its kernel's reply, and the uploads before it.
	session      *artifacts.Session
	unchanged    func(p string) bool
	kernel       *artifacts.KernelReply
	extraSources []artifacts.Source

	// tools is the run's tool channel, when it has one.
	tools *tools.Channel

	// What Cleanup removes of a run in a container of its own, once the
	// caller has the result.
	ws  *taskdir.Dir
	ctr runtime.Container
}

// NewRun is the run of job, which live follows and runs records; ctx ends
// with the run, and cancel ends it with a cause (the caller's, a flood's).
func (e *Executor) NewRun(ctx context.Context, cancel context.CancelCauseFunc, job Job, runs *registry.Runs, live *registry.Live) *Run {
	return &Run{Job: job, ex: e, runs: runs, live: live, ctx: ctx, cancel: cancel, killed: make(chan struct{})}
}

// Source is where a run's program runs: a container of its own (Fresh) or
// a session's (Call). Execute is the same for both; what differs is here.
type Source interface {
	// folders readies the task's folders for the run.
	folders(r *Run) (*taskdir.Dir, error)
	// channel says whether the run has a tool channel.
	channel(r *Run) bool
	// start starts the program with its output to st. A result instead
	// of a program is a run that ended before its program started.
	start(r *Run, ws *taskdir.Dir, st *streams) (program, *run.Result, error)
	// classify says how the program ended.
	classify(r *Run, end ended, st *streams) run.Result
	// collect readies what the bundle records of the folders after the
	// run; false leaves the run without a bundle (res says why).
	collect(r *Run, ws *taskdir.Dir, res *run.Result) bool
	// release lets go of what folders took for the run alone, once its
	// streams are closed.
	release(r *Run)
}

// program is what a source started.
type program interface {
	// wait returns how the program ended; an error is sandboxd's failure.
	wait() (ended, error)
	// stop ends the program early: the watcher's kill on cancellation,
	// timeout or flood.
	stop(ctx context.Context) error
	// timeout is what the watcher enforces by stop; 0 when the program's
	// own side does (a session's init interrupts a call).
	timeout() time.Duration
}

// ended is how a program ended: a container's exit, or a session call's.
type ended struct {
	runtime.Exit
	call *runtime.CallExit
}

// cleanupTimeout bounds removing a run's container and folders, which must
// happen even when the caller is gone.
const cleanupTimeout = 30 * time.Second

// Execute runs the program in src: its folders, its streams, its tool
// channel, its start, its end as the watcher saw it, its outputs and its
// bundle. What it made is left for Cleanup (or, in a session, to the
// session).
func (r *Run) Execute(src Source) (run.Result, error) {
	defer src.release(r)
	ws, err := src.folders(r)
	if err != nil {
		return run.Result{}, err
	}
	st, err := r.openStreams(ws)
	if err != nil {
		return run.Result{}, err
	}
	defer st.close()
	if src.channel(r) {
		r.tools = r.ex.channel(r)
	}
	res, err := r.runProgram(src, ws, st)
	if r.tools != nil {
		r.tools.Settled()
		res.ToolCalls = r.tools.Made()
	}
	if err != nil {
		return run.Result{}, err
	}
	res.StdoutTotal, res.StdoutTruncated = st.stdout.Counts()
	res.StderrTotal, res.StderrTruncated = st.stderr.Counts()
	if src.collect(r, ws, &res) {
		r.bundle(ws, st, &res)
	}
	return res, nil
}

// runProgram starts the program, tells the caller it started, kills it on
// cancellation, timeout or flood, and classifies how it ended.
func (r *Run) runProgram(src Source, ws *taskdir.Dir, st *streams) (run.Result, error) {
	defer func() {
		if r.endNetwork != nil {
			r.endNetwork()
		}
	}()
	prog, refused, err := src.start(r, ws, st)
	switch {
	case err != nil:
		return run.Result{}, err
	case refused != nil:
		return *refused, nil
	}
	started := run.Started{
		RunID: r.ID, Limits: r.Plan.Limits, Image: r.ImageName, ImageDigest: r.Image.ID,
		Runtime: r.OCIRuntime.Name, RuntimeVersion: r.OCIRuntime.Version, Backend: r.Info.Backend,
		Prestarted: r.ranIn != nil, Preimported: r.preimported(), StartedAt: r.startedAt.UTC(),
	}
	r.runs.Started(r.ID, started)
	r.emit.Started(started)

	exited := make(chan struct{})
	go r.watch(prog, exited)
	end, err := prog.wait()
	close(exited)
	if err != nil {
		return run.Result{}, err
	}
	r.killOnce.Do(func() {}) // no kill reason can be set from here on
	r.finishedAt = time.Now()
	if !end.StartedAt.IsZero() && !end.FinishedAt.Before(end.StartedAt) {
		r.startedAt, r.finishedAt = end.StartedAt, end.FinishedAt
	}
	return src.classify(r, end, st), nil
}

// followNetwork has the run's attachers and caller follow its network as
// it happens, numbered within the run. The binding's log calls it.
func (r *Run) followNetwork(i int, e netpolicy.Event) {
	ev := run.NetworkEvent{Index: r.netCall.Take(i, e), Event: e}
	if ev.Index < 0 {
		return // past the log's cap: counted, not kept
	}
	r.live.Network(ev.Index, e)
	r.emit.Network(ev)
}

// Deliver waits until the caller has taken the run's events, within
// stall: one that stalls longer is dropped, with the deadline's error.
func (r *Run) Deliver(stall time.Duration) error {
	if r.emit == nil {
		return nil
	}
	// An Observer that failed means its caller is gone.
	if err := r.emit.Finish(stall); errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// Cleanup removes the run's container, then its folders. It runs after the
// caller has the result: removing a container takes tens of milliseconds
// that need not sit on the request's path.
func (r *Run) Cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if r.ctr != nil {
		if err := r.ctr.Remove(ctx); err != nil {
			r.ex.cfg.Log.Error("remove container", "run", r.ID, "tenant", r.Tenant, "container", r.ctr.ID(), "err", err)
		}
	}
	if r.ws != nil {
		if err := r.ws.Remove(); err != nil {
			r.ex.cfg.Log.Error("remove task folder", "run", r.ID, "tenant", r.Tenant, "err", err)
		}
	}
}

// ContainerExited says whether the session's container ended during the
// call: the session ends with it.
func (r *Run) ContainerExited() bool { return r.containerExited }

// streams are a run's two output streams: capped for the caller, and kept
// on disk up to the kill threshold for the bundle.
type streams struct {
	stdout, stderr *output.Writer
	live           *registry.Live
}

func (r *Run) openStreams(ws *taskdir.Dir) (*streams, error) {
	lim := r.Plan.Limits
	em := output.NewEmitter(r.Observer, func(err error) { r.kill(killedCancelled, err) })
	r.emit = em
	st := &streams{live: r.live}
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
		killAt := max(w.limit, r.ex.cfg.KillOutputBytes)
		*w.dst = output.NewWriter(em, output.Cap{Stream: w.stream, Limit: w.limit, KillAt: killAt, OnFlood: r.flood, Store: f, Live: r.live})
	}
	r.live.Open(st.stdout.Store, st.stderr.Store)
	return st, nil
}

func (st *streams) close() {
	st.live.Close()
	for _, w := range []*output.Writer{st.stdout, st.stderr} {
		if w != nil {
			w.Store.Close()
		}
	}
}

// floodAt is where the stream that flooded was stopped.
func (st *streams) floodAt(s run.Stream) int64 {
	if s == run.Stderr {
		return st.stderr.KillAt
	}
	return st.stdout.KillAt
}

// kill records why the program is being killed (the first reason wins)
// and has the watcher kill it.
func (r *Run) kill(reason killReason, cause error) {
	r.killOnce.Do(func() {
		r.reason = reason
		if reason == killedCancelled && cause != nil && r.ctx.Err() == nil {
			r.cancel(cause)
		}
		close(r.killed)
	})
}

// flood is called when an output stream passes its kill threshold.
func (r *Run) flood(s run.Stream) {
	r.killOnce.Do(func() {
		r.reason = killedOutput
		r.flooded = s
		close(r.killed)
	})
}

// watch stops the program when the run is cancelled, its time is up, or a
// kill reason was set, until the program has ended.
func (r *Run) watch(p program, exited <-chan struct{}) {
	var timeUp <-chan time.Time
	if d := p.timeout(); d > 0 {
		timer := time.NewTimer(d)
		defer timer.Stop()
		timeUp = timer.C
	}
	select {
	case <-exited:
		return
	case <-r.ctx.Done():
		r.kill(killedCancelled, nil)
	case <-timeUp:
		r.killOnce.Do(func() {
			r.reason = killedTimeout
			close(r.killed)
		})
	case <-r.killed:
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), cleanupTimeout)
	defer cancel()
	if err := p.stop(ctx); err != nil {
		r.ex.cfg.Log.Error("stop the program", "run", r.ID, "tenant", r.Tenant, "err", err)
	}
}

// result is the run's result with status, code, signal and message.
func (r *Run) result(status run.Status, code, sig int, msg string, exit runtime.Exit) run.Result {
	return run.Result{
		RunID: r.ID, Tenant: r.Tenant, Status: status, ExitCode: code, Signal: sig,
		Duration: r.finishedAt.Sub(r.startedAt), Queued: r.Queued, PeakMemoryBytes: exit.PeakMemoryBytes,
		Limits: r.Plan.Limits, Message: msg,
	}
}

// preimported are the modules the program's pre-started interpreter had
// loaded.
func (r *Run) preimported() []string {
	if r.ranIn == nil {
		return nil
	}
	return r.ranIn.Modules
}
