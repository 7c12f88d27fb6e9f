// Package lifecycle is the one container lifecycle of every backend:
// create a container whose init waits for its task, launch the task in it,
// wait for the program's end, kill, remove and reap. A backend supplies
// only the narrow Port, written with its SDK; everything the
// backends share (what a start cut short leaves, how a refused start is
// classified, the exit report weighed against the backend's word, grace for
// late output and late OOM reports, parent cgroups and peak memory) is
// here, once.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/internal/sandbox/cgroup"
	"github.com/sandboxd/sandboxd/runtime"
)

// Port is what the lifecycle drives one container through: a backend's
// few calls of its SDK (Docker's API, containerd's client).
type Port interface {
	// Create creates the container of c, unstarted, and everything it
	// needs in the backend. On error it leaves nothing behind.
	Create(ctx context.Context, c Config) (Box, error)
	// Find returns the containers that carry all of labels, running or
	// not, for Reap.
	Find(ctx context.Context, labels map[string]string) ([]Box, error)
}

// Config is what Port.Create makes a container from.
type Config struct {
	// Name is the container's name in the backend.
	Name string
	// Spec is the container; its Argv, Env, Stdin, Stdout and Stderr are
	// not used: they come with the launch.
	Spec runtime.Spec
	// Layout is what the container has besides the spec's settings.
	Layout Layout
	// Cgroup is the container's parent cgroup, or "" for the backend's
	// default.
	Cgroup string
	// RestoreFrom, for a Checkpointing port, is a checkpoint's folder:
	// Start restores the container saved there instead of starting its
	// init.
	RestoreFrom string
}

// Box is one container of a backend.
type Box interface {
	// Start starts the created container's init, which waits on its
	// input. Its exit must be watched from before the start.
	Start(ctx context.Context) error
	// Update applies new limits to the running container.
	Update(ctx context.Context, l Limits) error
	// Attach starts copying the container's stdout and stderr to these
	// writers, as they are produced, until the output ends.
	Attach(stdout, stderr io.Writer)
	// Input is the init's stdin; closing it is the end of the input.
	Input() io.WriteCloser
	// Exited delivers the backend's word that the container has exited:
	// nil, or why the backend cannot tell.
	Exited() <-chan error
	// Status is how the container exited, once Exited has told.
	Status(ctx context.Context) (Status, error)
	// OutputDone is closed when all output has been copied; CloseOutput
	// ends the copy early.
	OutputDone() <-chan struct{}
	CloseOutput()
	// Kill kills every process of the container.
	Kill(ctx context.Context) error
	// Release sends SIGTERM to the init alone: an init that holds the
	// container after its report (launch.Spec.Hold) then exits.
	Release(ctx context.Context) error
	// Remove deletes the container and what the backend made for it, and
	// kills it first if it still runs.
	Remove(ctx context.Context) error
}

// Limits are what Box.Update changes in a running container.
type Limits struct {
	MemoryBytes int64
	// MemorySwapBytes limits memory and swap together.
	MemorySwapBytes int64
	CPUMillis       int64
	// PidsLimit is the pids cgroup limit (see PidsLimits).
	PidsLimit int64
}

// Status is how a container exited, as the backend tells it.
type Status struct {
	Code       int
	OOMKilled  bool
	FinishedAt time.Time
}

// Options configure a Lifecycle.
type Options struct {
	// InitPath is sandboxd's init on the backend's host, bound into every
	// container as PID 1.
	InitPath string
	// Cgroups, when set, puts every container under a parent cgroup of its
	// own below CgroupRoot, so that its peak memory can be read once it has
	// exited.
	Cgroups    *cgroup.Hierarchy
	CgroupRoot string
	// OOMGrace is how long an exit by SIGKILL waits for a late OOM report:
	// a backend that reports the kill and the exit on separate paths
	// needs some.
	OOMGrace time.Duration
	// Log receives what cannot be returned (default slog.Default()).
	Log *slog.Logger
}

// UseCgroups gives the containers parent cgroups of their own below
// parent, in the cgroup file system at root, unless unusable says why the
// backend cannot have them. Without them a result's peak memory is 0: this
// says so in the log at start, and why, rather than report 0s without a
// word (Docker's systemd cgroup driver, every current distribution's
// default, is the common case).
func (o *Options) UseCgroups(root, parent string, unusable error) {
	if unusable == nil && root == "" {
		unusable = errors.New("no cgroup file system given")
	}
	if unusable == nil {
		var h cgroup.Hierarchy
		if h, unusable = cgroup.Open(root); unusable == nil {
			o.Cgroups, o.CgroupRoot = &h, parent
			return
		}
	}
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	log.Warn("peak memory is not reported: results say 0", "why", unusable.Error())
}

// Lifecycle starts, prepares and reaps the containers of one backend.
type Lifecycle struct {
	port Port
	opts Options
	log  *slog.Logger
}

// New returns the lifecycle of a backend's port. It refuses an init that is not a
// regular file before any container needs it.
func New(port Port, opts Options) (*Lifecycle, error) {
	if err := checkInit(opts.InitPath); err != nil {
		return nil, err
	}
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	return &Lifecycle{port: port, opts: opts, log: log}, nil
}

func checkInit(path string) error {
	st, err := os.Stat(path)
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file", path)
	}
	if err != nil {
		return fmt.Errorf("sandboxd's init is missing (make build builds it): %w: %w", err, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// createTimeout bounds creating a container, which callers cannot cancel.
const createTimeout = time.Minute

// Start prepares a container and launches the task of spec in it.
func (l *Lifecycle) Start(ctx context.Context, spec runtime.Spec) (runtime.Container, error) {
	if err := spec.Validate(false); err != nil {
		return nil, err
	}
	c, err := l.create(ctx, spec, "")
	if err != nil {
		return nil, err
	}
	if err := c.Launch(ctx, spec.Task()); err != nil {
		c.removeAfterFailure(ctx)
		return nil, err
	}
	return c, nil
}

// Prepare creates and starts a container whose init waits for its task.
func (l *Lifecycle) Prepare(ctx context.Context, spec runtime.Spec) (runtime.Prepared, error) {
	if err := spec.Validate(true); err != nil {
		return nil, err
	}
	c, err := l.create(ctx, spec, "")
	if err != nil {
		// Not c: a nil *container in a Prepared is not a nil Prepared, and
		// the caller's cleanup would call Remove on it.
		return nil, err
	}
	return c, nil
}

// create makes and starts the container of spec. Creating is not cut short
// by the caller: Docker and containerd finish a create whose client has gone, and nobody
// would know of the container (containerd 1.6 also leaks the shim of a task
// create cancelled midway, containerd#6860). It runs to the end, bounded by
// its own timeout, and a cancelled caller then gets the ordinary teardown.
//
// With restoreFrom, the container is the checkpoint saved in that folder,
// restored.
func (l *Lifecycle) create(ctx context.Context, spec runtime.Spec, restoreFrom string) (*container, error) {
	c := &container{l: l, name: "sandboxd-" + spec.ID, runtime: spec.Runtime, resources: spec.Resources, control: ControlDir(spec)}
	c.uid, c.gid = spec.IDs()
	if l.opts.Cgroups != nil {
		c.cgroup = path.Join(l.opts.CgroupRoot, c.name)
	}
	createCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
	box, err := l.port.Create(createCtx, Config{Name: c.name, Spec: spec, Layout: LayoutOf(spec, l.opts.InitPath), Cgroup: c.cgroup, RestoreFrom: restoreFrom})
	cancel()
	if err != nil {
		c.removeCgroup()
		var r refusal
		if errors.As(err, &r) {
			return nil, startError(ctx, c.name, r.error)
		}
		return nil, err
	}
	c.box = box
	if err := ctx.Err(); err != nil {
		c.removeAfterFailure(ctx)
		return nil, fmt.Errorf("create %s: %w", c.name, err)
	}
	if err := box.Start(ctx); err != nil {
		c.removeAfterFailure(ctx)
		return nil, startError(ctx, c.name, err)
	}
	if spec.Prestart != nil && restoreFrom == "" {
		if err := c.prestart(spec); err != nil {
			c.removeAfterFailure(ctx)
			return nil, fmt.Errorf("pre-start in %s: %w", c.name, err)
		}
	}
	return c, nil
}

// startError marks a start refused by the OCI runtime (a missing working
// folder, an unusable image) as a failed precondition of the task rather
// than a failure of the backend. When the caller's ctx is done, the failure
// is the caller's, whatever the runtime made of it.
func startError(ctx context.Context, name string, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("start %s: %w", name, ctx.Err())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errdefs.IsUnavailable(err):
		return fmt.Errorf("start %s: %w", name, err)
	}
	return fmt.Errorf("container did not start: %w: %w", err, errdefs.ErrFailedPrecondition)
}

// LinkEgress gives the network namespace at nsPath, which a backend made
// for a container, its link to the egress gateway gw at addr: the link
// goes with the namespace. A daemon without a gateway refuses.
func LinkEgress(gw runtime.EgressGateway, addr netip.Addr, nsPath string) error {
	if gw == nil {
		return fmt.Errorf("this daemon has no egress gateway for allow-listed networks: %w", errdefs.ErrFailedPrecondition)
	}
	l, err := gw.Attach(addr)
	if err != nil {
		return err
	}
	if err := gw.Configure(l, nsPath); err != nil {
		return errors.Join(err, gw.Detach(addr))
	}
	return nil
}

// Refusal marks an error of Port.Create as the OCI runtime's refusal of
// the container (a missing working folder, an unusable image), which the
// lifecycle reports as it reports a refused start.
func Refusal(err error) error { return refusal{err} }

type refusal struct{ error }

func (r refusal) Unwrap() error { return r.error }

// Reap removes every container that carries all of labels, and the parent
// cgroups that no container uses any more. It is how a daemon clears what
// an earlier instance of itself left behind.
func (l *Lifecycle) Reap(ctx context.Context, labels map[string]string) (int, error) {
	boxes, err := l.port.Find(ctx, labels)
	if err != nil {
		return 0, err
	}
	var errs []error
	removed := 0
	for _, b := range boxes {
		if err := b.Remove(ctx); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	if h := l.opts.Cgroups; h != nil {
		children, err := h.Children(l.opts.CgroupRoot)
		if err != nil {
			errs = append(errs, err)
		}
		for _, name := range children {
			// A cgroup still in use belongs to a live container that does
			// not carry these labels, perhaps another engine's on the same
			// parent; RemoveUnused leaves it running.
			_, _ = h.RemoveUnused(path.Join(l.opts.CgroupRoot, name))
		}
	}
	return removed, errors.Join(errs...)
}

// Close removes the parent cgroup of every container, which holds nothing
// once they are all removed.
func (l *Lifecycle) Close() error {
	if l.opts.Cgroups == nil {
		return nil
	}
	return l.opts.Cgroups.Remove(l.opts.CgroupRoot)
}
