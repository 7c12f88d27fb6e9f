package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/internal/sandbox/launch"
	"github.com/sandboxd/sandboxd/runtime"
)

// container is one container of the lifecycle: a Box and what the
// lifecycle knows of it.
type container struct {
	l         *Lifecycle
	box       Box
	name      string
	cgroup    string
	runtime   string
	resources runtime.Resources // as created; Launch updates them
	uid, gid  uint32            // the program's user and group
	control   string            // the host's control folder, if bound
	// prestarted says an interpreter waits for the task, started with
	// RLIMIT_NPROC prestartNproc.
	prestarted    bool
	prestartNproc int64

	// report watches the output for the init's exit report, from the
	// launch, at launchedAt.
	report     *launch.Report
	launchedAt time.Time
	// holds says the init holds the container after its report
	// (launch.Spec.Hold), the report taken as the exit, until Remove lets
	// it go. Not under mu, which a Wait holds.
	holds atomic.Bool
	// session is set when the container serves a session instead.
	session *session
	// endTools, for a task with a tool channel, ends the channel and the
	// input once the program has ended.
	endTools func()

	mu   sync.Mutex
	exit *runtime.Exit
}

var _ runtime.Prepared = (*container)(nil)

func (c *container) ID() string { return c.name }

// Launch gives the container its task: the limits that differ from those it
// was created with, its output writers, and the launch message with the
// task's stdin.
func (c *container) Launch(ctx context.Context, t runtime.Task) error {
	if c.report != nil || c.session != nil {
		return fmt.Errorf("launch %s: the container already has its task: %w", c.name, errdefs.ErrFailedPrecondition)
	}
	if err := t.Validate(); err != nil {
		return err
	}
	_, nproc := PidsLimits(c.runtime, t.Resources.Pids)
	if t.Prestarted {
		switch {
		case !c.prestarted:
			return fmt.Errorf("launch %s: no interpreter was pre-started: %w", c.name, errdefs.ErrFailedPrecondition)
		case len(t.Compile) > 0 || len(t.Argv) < 2:
			return fmt.Errorf("launch %s: a pre-started interpreter runs a file, with no compile step: %w", c.name, errdefs.ErrInvalidArgument)
		case nproc != c.prestartNproc:
			return fmt.Errorf("launch %s: the pre-started interpreter has RLIMIT_NPROC %d, the task %d: %w", c.name, c.prestartNproc, nproc, errdefs.ErrFailedPrecondition)
		}
	}
	if t.Resources != c.resources {
		if err := c.update(ctx, t.Resources); err != nil {
			return fmt.Errorf("update %s: %w", c.name, err)
		}
		c.resources = t.Resources
	}
	// The init holds the container after its report where the report can
	// stand for the exit (see awaitExit).
	hold := c.l.opts.Cgroups != nil && c.cgroup != ""
	msg := launch.Spec{Argv: t.Argv, Compile: t.Compile, Env: t.Env, Dir: t.WorkingDir, UID: c.uid, GID: c.gid, Nproc: nproc, Prestarted: t.Prestarted, Tools: t.Tools != nil, Hold: hold}
	if t.Tools != nil {
		return c.launchWithTools(t, msg)
	}
	report, err := launch.NewReport(t.Stdout, t.Stderr)
	if err != nil {
		return err
	}
	msg.Report = report.Token()
	input, err := launch.Input(msg, t.Stdin)
	if err != nil {
		return err
	}
	c.report = report
	c.box.Attach(report.Stdout(), report.Stderr())
	c.launchedAt = time.Now()
	go func() {
		w := c.box.Input()
		if _, err := io.Copy(w, input); err != nil {
			c.l.log.Debug("input copy ended", "container", c.name, "err", err)
		}
		_ = w.Close()
	}()
	return nil
}

// launchWithTools launches a task with a tool channel: its input and the
// init's stdout are in frames (see launch.ToolsFD), and its input stays
// open for the answers until the program has ended.
func (c *container) launchWithTools(t runtime.Task, msg launch.Spec) error {
	requests, toServe := io.Pipe()
	deframer := launch.NewDeframer(t.Stdout, t.Stderr, toServe)
	report, err := launch.NewReport(deframer, t.Stderr)
	if err != nil {
		return err
	}
	msg.Report = report.Token()
	w := c.box.Input()
	input := launch.NewFrameInput(w)
	var once sync.Once
	c.endTools = func() {
		once.Do(func() {
			toServe.Close()
			_ = w.Close()
			if err := deframer.Err(); err != nil {
				c.l.log.Warn("the init's output was not in frames", "container", c.name, "err", err)
			}
		})
	}
	c.report = report
	c.box.Attach(report.Stdout(), report.Stderr())
	c.launchedAt = time.Now()
	go func() {
		if err := launch.Write(w, msg); err != nil {
			c.l.log.Debug("launch message not sent", "container", c.name, "err", err)
			return
		}
		go t.Tools.Serve(requests, input.Answers())
		if err := input.CopyStdin(t.Stdin); err != nil {
			c.l.log.Debug("input copy ended", "container", c.name, "err", err)
		}
	}()
	go func() {
		// Every request came before the report: the channel ends there.
		select {
		case <-report.Done():
		case <-c.box.OutputDone():
		}
		c.endTools()
	}()
	return nil
}

// update gives the running container the limits of r. cgroup v1 refuses a
// memory limit above the memory+swap one, and runsc writes the memory limit
// first: raising memory, memory+swap is raised on its own before.
func (c *container) update(ctx context.Context, r runtime.Resources) error {
	pids, _ := PidsLimits(c.runtime, r.Pids)
	l := Limits{MemoryBytes: r.MemoryBytes, MemorySwapBytes: r.MemoryBytes, CPUMillis: r.CPUMillis, PidsLimit: pids}
	if r.MemoryBytes > c.resources.MemoryBytes {
		swapFirst := l
		swapFirst.MemoryBytes = c.resources.MemoryBytes
		if err := c.box.Update(ctx, swapFirst); err != nil {
			return err
		}
	}
	return c.box.Update(ctx, l)
}

// outputGrace bounds how long Wait waits for the output to drain after the
// container has exited.
const outputGrace = 2 * time.Second

// Wait blocks until the program has ended and its output is copied: until
// the init's exit report, or the backend's word.
func (c *container) Wait(ctx context.Context) (runtime.Exit, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.exit != nil {
		return *c.exit, nil
	}
	if c.report == nil {
		return runtime.Exit{}, fmt.Errorf("wait for %s: it was never launched: %w", c.name, errdefs.ErrFailedPrecondition)
	}
	reported, err := awaitExit(ctx, c.box.Exited(), c.report, c.launchedAt, c.l.opts.Cgroups, c.cgroup, c.release)
	if err != nil {
		return runtime.Exit{}, fmt.Errorf("wait for %s: %w", c.name, err)
	}
	if reported != nil {
		reported.CompileFailed = compileFailed(c.report)
		c.exit = reported
		// Only a launch that asked the init to hold gets a reported exit.
		c.holds.Store(true)
		return *reported, nil
	}
	select {
	case <-c.box.OutputDone():
	case <-time.After(outputGrace):
		c.l.log.Warn("output did not end after exit; closing it", "container", c.name)
		c.box.CloseOutput()
		<-c.box.OutputDone()
	}
	c.report.Flush()
	st, err := c.status(ctx)
	if err != nil {
		return runtime.Exit{}, fmt.Errorf("status of %s: %w", c.name, err)
	}
	exit := runtime.Exit{Code: st.Code, OOMKilled: st.OOMKilled, StartedAt: c.launchedAt, FinishedAt: st.FinishedAt}
	if !st.OOMKilled {
		exit.CompileFailed = compileFailed(c.report)
	}
	if c.cgroup != "" {
		if peak, err := c.l.opts.Cgroups.PeakMemory(c.cgroup); err == nil {
			exit.PeakMemoryBytes = peak
		} else {
			c.l.log.Debug("peak memory unknown", "container", c.name, "err", err)
		}
	}
	c.exit = &exit
	return exit, nil
}

// status asks the backend how the container exited, and gives an exit by
// SIGKILL the backend's OOM grace to turn out to be an OOM kill.
func (c *container) status(ctx context.Context) (Status, error) {
	st, err := c.box.Status(ctx)
	if err != nil || st.OOMKilled || st.Code != 128+int(syscall.SIGKILL) || c.l.opts.OOMGrace <= 0 {
		return st, err
	}
	deadline := time.Now().Add(c.l.opts.OOMGrace)
	for time.Now().Before(deadline) {
		time.Sleep(min(20*time.Millisecond, time.Until(deadline)))
		if later, err := c.box.Status(ctx); err == nil && later.OOMKilled {
			return later, nil
		}
	}
	return st, nil
}

// release lets an init that holds the container exit: through its control
// folder where it has one, which costs no process (the backend's signal
// is an OCI runtime's kill), or by SIGTERM. Were both lost, the init exits
// at launch.HoldBound all the same.
func (c *container) release(ctx context.Context) {
	if c.control != "" {
		err := os.WriteFile(filepath.Join(c.control, path.Base(launch.ControlRelease)), nil, 0o600)
		if err == nil {
			return
		}
		c.l.log.Debug("no release in the control folder; signalling the init", "container", c.name, "err", err)
	}
	if err := c.box.Release(ctx); err != nil {
		c.l.log.Warn("the init holding its container was not let go; it goes at its bound", "container", c.name, "err", err)
	}
}

// exitBound bounds how long Remove waits for a released init's exit
// before the backend kills it.
const exitBound = 2 * time.Second

// letGo releases an init that holds the container and waits for its exit,
// within exitBound: a container that has exited is removed without a kill.
func (c *container) letGo(ctx context.Context) {
	c.release(ctx)
	select {
	case <-c.box.Exited():
	case <-time.After(exitBound):
		c.l.log.Warn("a released init did not exit; killing it", "container", c.name)
	case <-ctx.Done():
	}
}

// Kill kills every process of the container at once.
func (c *container) Kill(ctx context.Context) error {
	if err := c.box.Kill(ctx); err != nil {
		return fmt.Errorf("kill %s: %w", c.name, err)
	}
	return nil
}

// Remove deletes the container, then its parent cgroup.
func (c *container) Remove(ctx context.Context) error {
	if c.endTools != nil {
		c.endTools()
	}
	if c.session != nil {
		c.session.procs.endingNow()
		defer c.session.procs.endAll()
	}
	if c.holds.Swap(false) {
		c.letGo(ctx)
	}
	if err := c.box.Remove(ctx); err != nil {
		return fmt.Errorf("remove %s: %w", c.name, err)
	}
	return c.removeCgroup()
}

func (c *container) removeCgroup() error {
	if c.cgroup == "" {
		return nil
	}
	if err := c.l.opts.Cgroups.Remove(c.cgroup); err != nil {
		return fmt.Errorf("remove cgroup %s: %w", c.cgroup, err)
	}
	return nil
}

// removeAfterFailure removes a container that failed to start or launch.
// The caller's context may be what failed; cleaning up must not.
func (c *container) removeAfterFailure(ctx context.Context) {
	rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := c.Remove(rmCtx); err != nil && !errors.Is(err, context.Canceled) {
		c.l.log.Warn("remove a container after a failed start", "container", c.name, "err", err)
	}
}

// prestart has the init start spec's pre-started interpreter, which waits
// for the task's message as the init does.
func (c *container) prestart(spec runtime.Spec) error {
	_, nproc := PidsLimits(c.runtime, spec.Resources.Pids)
	argv, err := launch.Prestarter(spec.Prestart.Language, spec.Prestart.Interpreter, spec.Prestart.Modules)
	if err != nil {
		return err
	}
	msg := launch.Spec{Prestart: true, Argv: argv, Env: spec.Env, Dir: spec.WorkingDir, UID: c.uid, GID: c.gid, Nproc: nproc}
	if err := launch.Write(c.box.Input(), msg); err != nil {
		return err
	}
	c.prestarted, c.prestartNproc = true, nproc
	return nil
}
