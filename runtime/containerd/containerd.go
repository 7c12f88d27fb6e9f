// Package containerd runs task containers through the containerd API,
// without the Docker engine: it builds each container's OCI spec itself,
// runs runc through containerd's runc shim, and runsc through the same shim
// with runsc as its binary. Images come from the same offline builds,
// imported into containerd's namespace by the set-up.
package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/events"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/typeurl/v2"
	"github.com/distribution/reference"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxd/sandboxd/internal/cgroup"
	"github.com/sandboxd/sandboxd/internal/launch"
	"github.com/sandboxd/sandboxd/runtime"
)

// Client is the subset of the containerd client that this backend calls.
type Client interface {
	Version(ctx context.Context) (client.Version, error)
	GetImage(ctx context.Context, ref string) (client.Image, error)
	ListImages(ctx context.Context, filters ...string) ([]client.Image, error)
	NewContainer(ctx context.Context, id string, opts ...client.NewContainerOpts) (client.Container, error)
	Containers(ctx context.Context, filters ...string) ([]client.Container, error)
	Subscribe(ctx context.Context, filters ...string) (<-chan *events.Envelope, <-chan error)
	Close() error
}

var _ Client = (*client.Client)(nil)

const (
	shim        = "io.containerd.runc.v2"
	snapshotter = "overlayfs"
	// labelNetns records a container's network namespace, so that Reap
	// can unpin it.
	labelNetns = "io.sandboxd.containerd.netns"
	// createTimeout bounds creating a container and its task, which
	// callers cannot cancel.
	createTimeout = time.Minute
)

// Runtime starts task containers on containerd.
type Runtime struct {
	client     Client
	namespace  string
	runscPath  string
	runscRoot  string
	initPath   string
	netnsDir   string
	cgroups    *cgroup.Hierarchy
	cgroupRoot string
	log        *slog.Logger

	mu     sync.Mutex
	images map[string]string // config digest -> image name
}

var (
	_ runtime.Runtime  = (*Runtime)(nil)
	_ runtime.Preparer = (*Runtime)(nil)
)

// Option configures a Runtime.
type Option func(*Runtime)

// WithRunsc offers gVisor: runsc at path, with its state below root.
func WithRunsc(path, root string) Option {
	return func(r *Runtime) { r.runscPath, r.runscRoot = path, root }
}

// WithCgroups puts every container under a parent cgroup of its own below
// root in h, so that its peak memory can be read once it has exited.
func WithCgroups(h cgroup.Hierarchy, root string) Option {
	return func(r *Runtime) { r.cgroups, r.cgroupRoot = &h, root }
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(r *Runtime) { r.log = l }
}

// New returns a Runtime on c. Containers are made in namespace; initPath is
// sandboxd's init, bound into each as PID 1; network namespaces are pinned
// below netnsDir.
func New(c Client, namespace, initPath, netnsDir string, opts ...Option) *Runtime {
	r := &Runtime{client: c, namespace: namespace, initPath: initPath, netnsDir: netnsDir, log: slog.Default(), images: map[string]string{}}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Connect reaches containerd at address and returns a Runtime on it. When
// cgroupRoot (normally /sys/fs/cgroup) is readable, containers get parent
// cgroups below cgroupParent so that peak memory is reported.
func Connect(ctx context.Context, address, namespace, initPath, netnsDir, cgroupRoot, cgroupParent string, opts ...Option) (*Runtime, error) {
	if _, err := os.Stat(initPath); err != nil {
		return nil, errdefs.ErrFailedPrecondition.WithMessage(fmt.Sprintf("sandboxd's init %s is missing (make build builds it): %v", initPath, err))
	}
	c, err := client.New(address, client.WithDefaultNamespace(namespace), client.WithTimeout(10*time.Second))
	if err != nil {
		return nil, errdefs.ErrUnavailable.WithMessage(fmt.Sprintf("containerd at %s does not answer: %v", address, err))
	}
	if _, err := c.Version(ctx); err != nil {
		c.Close()
		return nil, errdefs.ErrUnavailable.WithMessage(fmt.Sprintf("containerd at %s does not answer: %v", address, err))
	}
	if h, err := cgroup.Open(cgroupRoot); err == nil {
		opts = append([]Option{WithCgroups(h, cgroupParent)}, opts...)
	}
	return New(c, namespace, initPath, netnsDir, opts...), nil
}

func (r *Runtime) ns(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, r.namespace)
}

// Info reports containerd's version and the runtimes it can run.
func (r *Runtime) Info(ctx context.Context) (runtime.Info, error) {
	v, err := r.client.Version(r.ns(ctx))
	if err != nil {
		return runtime.Info{}, engineError("version", err)
	}
	info := runtime.Info{Backend: "containerd", Version: v.Version, DefaultRuntime: "runc"}
	if path, err := exec.LookPath("runc"); err == nil {
		info.Runtimes = append(info.Runtimes, runtime.OCIRuntime{Name: "runc", Version: runtime.BinaryVersion(ctx, path)})
	}
	if r.runscPath != "" {
		if _, err := os.Stat(r.runscPath); err == nil {
			info.Runtimes = append(info.Runtimes, runtime.OCIRuntime{Name: runtime.RunscName, Version: runtime.BinaryVersion(ctx, r.runscPath)})
		}
	}
	return info, nil
}

// Image resolves a name, or the digest of an image's config (its ID, the
// same as Docker's image ID), to an image in containerd's namespace.
func (r *Runtime) Image(ctx context.Context, ref string) (runtime.Image, error) {
	ctx = r.ns(ctx)
	var img client.Image
	if strings.HasPrefix(ref, "sha256:") {
		list, err := r.client.ListImages(ctx)
		if err != nil {
			return runtime.Image{}, engineError("list images", err)
		}
		for _, candidate := range list {
			if cfg, err := candidate.Config(ctx); err == nil && cfg.Digest.String() == ref {
				img = candidate
				break
			}
		}
	} else {
		named, err := reference.ParseDockerRef(ref)
		if err != nil {
			return runtime.Image{}, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("image %q: %v", ref, err))
		}
		if img, err = r.client.GetImage(ctx, named.String()); err != nil && !errdefs.IsNotFound(err) {
			return runtime.Image{}, engineError("get image", err)
		}
	}
	if img == nil {
		return runtime.Image{}, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("image %s is not in containerd's namespace %s", ref, r.namespace))
	}
	cfg, err := img.Config(ctx)
	if err != nil {
		return runtime.Image{}, engineError("image config", err)
	}
	spec, err := img.Spec(ctx)
	if err != nil {
		return runtime.Image{}, engineError("image spec", err)
	}
	r.mu.Lock()
	r.images[cfg.Digest.String()] = img.Name()
	r.mu.Unlock()
	return runtime.Image{ID: cfg.Digest.String(), Ref: ref, Labels: spec.Config.Labels}, nil
}

// Start prepares a container and launches the task of spec in it.
func (r *Runtime) Start(ctx context.Context, spec runtime.Spec) (runtime.Container, error) {
	if err := spec.Validate(false); err != nil {
		return nil, err
	}
	c, err := r.create(ctx, spec)
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
func (r *Runtime) Prepare(ctx context.Context, spec runtime.Spec) (runtime.Prepared, error) {
	if err := spec.Validate(true); err != nil {
		return nil, err
	}
	return r.create(ctx, spec)
}

// create creates and starts a container whose init waits on its stdin for
// the task that Launch gives.
func (r *Runtime) create(ctx context.Context, spec runtime.Spec) (*ctrdContainer, error) {
	ctx = r.ns(ctx)
	img, err := r.image(ctx, spec.Image)
	if err != nil {
		return nil, err
	}
	stdin, stdinW := io.Pipe()
	c := &ctrdContainer{
		rt: r, id: "sandboxd-" + spec.ID, runtime: spec.Runtime, resources: spec.Resources,
		late: newLateStreams(), stdin: stdinW,
	}
	if r.cgroups != nil {
		c.cgroup = path.Join(r.cgroupRoot, c.id)
	}
	cgroupsPath := path.Join("/sandboxd-unaccounted", c.id)
	if c.cgroup != "" {
		// The container's own cgroup goes when it exits; its parent stays
		// and keeps the peak.
		cgroupsPath = path.Join(c.cgroup, "task")
	}
	if c.netns, err = newNetns(r.netnsDir, c.id); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			c.removeAfterFailure(ctx)
		}
	}()
	opts := &options.Options{}
	if spec.Runtime == runtime.RunscName {
		if r.runscPath == "" {
			return nil, errdefs.ErrFailedPrecondition.WithMessage("runsc is not configured for the containerd backend")
		}
		opts = &options.Options{BinaryName: r.runscPath, Root: r.runscRoot}
	}
	labels := map[string]string{labelNetns: c.netns}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	// Creating the container and its task is not cut short by the caller:
	// containerd finishes a create whose client has gone, and nobody would
	// know of the container (a pool stopped mid-create left one), and
	// containerd 1.6 leaks the shim of a task create cancelled midway (it
	// forgets the shim but the shim lives on, containerd#6860). Both run to
	// the end, bounded by their own timeout, and a cancelled caller then
	// gets the ordinary teardown above.
	createCtx, cancelCreate := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
	defer cancelCreate()
	c.ctr, err = r.client.NewContainer(createCtx, c.id,
		client.WithImage(img),
		client.WithSnapshotter(snapshotter),
		// The snapshot is writable for the runtime to make mount points in
		// (/mnt/NAME is not in any image); the spec's read-only root has the
		// runtime remount it read-only before the program starts.
		client.WithNewSnapshot(c.id, img),
		client.WithRuntime(shim, opts),
		client.WithContainerLabels(labels),
		client.WithNewSpec(specOpts(spec, r.initPath, cgroupsPath, c.netns)...),
	)
	if err != nil {
		return nil, engineError("create container", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, engineError("create container", err)
	}
	// OOM kills are reported as events: listen before anything runs.
	evCtx, cancelEvents := context.WithCancel(context.WithoutCancel(ctx))
	c.cancelEvents = cancelEvents
	c.oom = make(chan struct{})
	evs, errs := r.client.Subscribe(evCtx, `topic=="/tasks/oom"`)
	go c.watchOOM(evs, errs)

	created := make(chan struct{})
	// The shim holds the stdin pipe open: the program sees its end only
	// once the client says so, after copying all of it.
	stdinReader := &stdinEOF{r: stdin, onEOF: func() {
		<-created
		if c.task == nil {
			return
		}
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := c.task.CloseIO(closeCtx, client.WithStdinCloser); err != nil {
			r.log.Debug("close stdin", "container", c.id, "err", err)
		}
	}}
	stdout, stderr := lateWriter{c.late, &c.late.stdout}, lateWriter{c.late, &c.late.stderr}
	c.task, err = c.ctr.NewTask(createCtx, cio.NewCreator(cio.WithStreams(stdinReader, stdout, stderr)))
	close(created)
	if err != nil {
		return nil, startError(createCtx, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, engineError("create task", err)
	}
	if c.exited, err = c.task.Wait(context.WithoutCancel(ctx)); err != nil {
		return nil, engineError("wait for task", err)
	}
	if err := c.task.Start(ctx); err != nil {
		return nil, startError(ctx, err)
	}
	ok = true
	return c, nil
}

// removeAfterFailure removes a container that failed to start or launch.
// The caller's context may be what failed; cleaning up must not.
func (c *ctrdContainer) removeAfterFailure(ctx context.Context) {
	rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := c.Remove(rmCtx); err != nil {
		c.rt.log.Warn("remove container after failed start", "container", c.id, "err", err)
	}
}

// image finds the containerd image of a config digest Image returned.
func (r *Runtime) image(ctx context.Context, id string) (client.Image, error) {
	r.mu.Lock()
	name, ok := r.images[id]
	r.mu.Unlock()
	if !ok {
		if _, err := r.Image(ctx, id); err != nil {
			return nil, err
		}
		r.mu.Lock()
		name = r.images[id]
		r.mu.Unlock()
	}
	img, err := r.client.GetImage(ctx, name)
	if err != nil {
		return nil, engineError("get image", err)
	}
	if unpacked, err := img.IsUnpacked(ctx, snapshotter); err == nil && !unpacked {
		if err := img.Unpack(ctx, snapshotter); err != nil {
			return nil, engineError("unpack image", err)
		}
	}
	return img, nil
}

// Reap removes every container that carries all of labels, their network
// namespaces, and the parent cgroups no container uses any more.
func (r *Runtime) Reap(ctx context.Context, labels map[string]string) (int, error) {
	ctx = r.ns(ctx)
	var filters []string
	for k, v := range labels {
		filters = append(filters, fmt.Sprintf("labels.%q==%q", k, v))
	}
	list, err := r.client.Containers(ctx, strings.Join(filters, ","))
	if err != nil {
		return 0, engineError("list containers", err)
	}
	var errs []error
	for _, ctr := range list {
		c := &ctrdContainer{rt: r, id: ctr.ID(), ctr: ctr}
		if l, err := ctr.Labels(ctx); err == nil {
			c.netns = l[labelNetns]
		}
		if t, err := ctr.Task(ctx, nil); err == nil {
			c.task = t
		}
		if err := c.Remove(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if r.cgroups != nil {
		children, _ := r.cgroups.Children(r.cgroupRoot)
		for _, name := range children {
			_ = r.cgroups.Remove(path.Join(r.cgroupRoot, name))
		}
	}
	return len(list), errors.Join(errs...)
}

// stdinEOF calls onEOF, once, in the background, when r ends.
type stdinEOF struct {
	r     io.Reader
	once  sync.Once
	onEOF func()
}

func (s *stdinEOF) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if errors.Is(err, io.EOF) {
		s.once.Do(func() { go s.onEOF() })
	}
	return n, err
}

// Close releases the client, and removes this runtime's parent cgroup and
// network namespace folder, which hold nothing once every container is
// removed.
func (r *Runtime) Close() error {
	var errs []error
	if r.cgroups != nil {
		errs = append(errs, r.cgroups.Remove(r.cgroupRoot))
	}
	if err := os.Remove(r.netnsDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	errs = append(errs, r.client.Close())
	return errors.Join(errs...)
}

// ctrdContainer is one container started by Runtime.
type ctrdContainer struct {
	rt           *Runtime
	id           string
	runtime      string
	resources    runtime.Resources // as created; Launch updates them
	late         *lateStreams      // the output, whose writers Launch sets
	stdin        *io.PipeWriter    // where Launch writes the init's input
	report       *launch.Report    // watches the output for the exit report
	cgroup       string
	netns        string
	ctr          client.Container
	task         client.Task
	exited       <-chan client.ExitStatus
	launchedAt   time.Time
	cancelEvents context.CancelFunc
	oom          chan struct{}
	oomOnce      sync.Once

	mu   sync.Mutex
	exit *runtime.Exit
}

func (c *ctrdContainer) ID() string { return c.id }

// Launch gives the container its task.
func (c *ctrdContainer) Launch(ctx context.Context, t runtime.Task) error {
	ctx = c.rt.ns(ctx)
	if t.Resources != c.resources {
		cgroupPids, _ := runtime.PidsLimits(c.runtime, t.Resources.Pids)
		r := t.Resources
		limit, quota, period := r.MemoryBytes, r.CPUMillis*cpuPeriod/1000, uint64(cpuPeriod)
		err := c.task.Update(ctx, client.WithResources(&specs.LinuxResources{
			Memory: &specs.LinuxMemory{Limit: &limit, Swap: &limit},
			CPU:    &specs.LinuxCPU{Quota: &quota, Period: &period},
			Pids:   &specs.LinuxPids{Limit: &cgroupPids},
		}))
		if err != nil {
			return engineError("update task", err)
		}
		c.resources = r
	}
	report, err := launch.NewReport(t.Stdout, t.Stderr)
	if err != nil {
		return err
	}
	_, nproc := runtime.PidsLimits(c.runtime, t.Resources.Pids)
	stdin, err := launch.Input(launch.Spec{Argv: t.Argv, Env: t.Env, Dir: t.WorkingDir, Nproc: nproc, Report: report.Token()}, t.Stdin)
	if err != nil {
		return err
	}
	c.report = report
	c.late.set(report.Stdout(), report.Stderr())
	c.launchedAt = time.Now()
	go func() {
		_, err := io.Copy(c.stdin, stdin)
		c.stdin.CloseWithError(err)
	}()
	return nil
}

// lateStreams are a container's output writers, which exist only once it
// is launched. The init writes nothing before it has its task; a container
// removed unlaunched discards.
type lateStreams struct {
	once           sync.Once
	ready          chan struct{}
	stdout, stderr io.Writer
}

func newLateStreams() *lateStreams { return &lateStreams{ready: make(chan struct{})} }

func (l *lateStreams) set(stdout, stderr io.Writer) {
	l.once.Do(func() {
		l.stdout, l.stderr = stdout, stderr
		close(l.ready)
	})
}

// lateWriter writes to *w once its streams are set.
type lateWriter struct {
	l *lateStreams
	w *io.Writer
}

func (lw lateWriter) Write(p []byte) (int, error) {
	<-lw.l.ready
	return (*lw.w).Write(p)
}

// watchOOM closes c.oom when containerd reports an OOM kill in c.
func (c *ctrdContainer) watchOOM(evs <-chan *events.Envelope, errs <-chan error) {
	for {
		select {
		case ev := <-evs:
			if ev == nil {
				return
			}
			v, err := typeurl.UnmarshalAny(ev.Event)
			if oom, ok := v.(*apievents.TaskOOM); err == nil && ok && oom.ContainerID == c.id {
				c.oomOnce.Do(func() { close(c.oom) })
			}
		case <-errs:
			return
		}
	}
}

// oomGrace is how long an exit by SIGKILL waits for a late OOM event: the
// shim reports the kill and the exit on separate paths.
const oomGrace = 200 * time.Millisecond

// outputGrace bounds how long Wait waits for the output to drain after the
// container has exited.
const outputGrace = 2 * time.Second

// Wait blocks until the program has ended and its output is copied: until
// the init's exit report, or containerd's word.
func (c *ctrdContainer) Wait(ctx context.Context) (runtime.Exit, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.exit != nil {
		return *c.exit, nil
	}
	reported, status, err := runtime.AwaitExit(ctx, c.exited, c.report, c.launchedAt, c.rt.cgroups, c.cgroup)
	if err != nil {
		return runtime.Exit{}, err
	}
	if reported != nil {
		c.exit = reported
		return *reported, nil
	}
	code, exitedAt, err := status.Result()
	if err != nil {
		return runtime.Exit{}, engineError("wait for task", err)
	}
	drained := make(chan struct{})
	go func() {
		c.task.IO().Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(outputGrace):
		c.rt.log.Warn("output did not end after exit; closing it", "container", c.id)
		c.task.IO().Cancel()
		<-drained
	}
	if c.report != nil {
		c.report.Flush()
	}
	exit := runtime.Exit{Code: int(code), StartedAt: c.launchedAt, FinishedAt: exitedAt}
	select {
	case <-c.oom:
		exit.OOMKilled = true
	default:
		if int(code) == 128+int(syscall.SIGKILL) {
			select {
			case <-c.oom:
				exit.OOMKilled = true
			case <-time.After(oomGrace):
			}
		}
	}
	if c.cgroup != "" {
		if peak, err := c.rt.cgroups.PeakMemory(c.cgroup); err == nil {
			exit.PeakMemoryBytes = peak
		}
	}
	c.exit = &exit
	return exit, nil
}

// Kill kills every process of the container at once.
func (c *ctrdContainer) Kill(ctx context.Context) error {
	err := c.task.Kill(c.rt.ns(ctx), syscall.SIGKILL, client.WithKillAll)
	if err != nil && !errdefs.IsNotFound(err) && !errdefs.IsFailedPrecondition(err) {
		return engineError("kill task", err)
	}
	return nil
}

// Remove deletes the task, the container, its snapshot, network namespace
// and parent cgroup.
func (c *ctrdContainer) Remove(ctx context.Context) error {
	ctx = c.rt.ns(ctx)
	var errs []error
	if c.cancelEvents != nil {
		c.cancelEvents()
	}
	if c.late != nil { // not for a container found by Reap
		c.late.set(io.Discard, io.Discard)
		c.stdin.Close()
	}
	if c.task == nil && c.ctr != nil {
		// A creation cut short may have made the task without saying so.
		if t, err := c.ctr.Task(ctx, nil); err == nil {
			c.task = t
		}
	}
	if c.task != nil {
		if err := c.deleteTask(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if c.ctr != nil {
		if err := c.ctr.Delete(ctx, client.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, engineError("delete container", err))
		}
	}
	if c.netns != "" && filepath.Dir(c.netns) == c.rt.netnsDir {
		if err := removeNetns(c.netns); err != nil {
			errs = append(errs, err)
		}
	}
	if c.cgroup != "" && len(errs) == 0 {
		if err := c.rt.cgroups.Remove(c.cgroup); err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", c.cgroup, err))
		}
	}
	return errors.Join(errs...)
}

// deleteTask deletes the task, killing it first only if it still runs:
// asking runsc to kill a sandbox that has exited fails.
func (c *ctrdContainer) deleteTask(ctx context.Context) error {
	_, err := c.task.Delete(ctx)
	if err == nil || errdefs.IsNotFound(err) {
		return nil
	}
	if !errdefs.IsFailedPrecondition(err) {
		return engineError("delete task", err)
	}
	exited, werr := c.task.Wait(ctx)
	if werr != nil {
		return engineError("wait for task", werr)
	}
	// A kill can fail because the task is already on its way out (runsc:
	// "sandbox is not running"); the exit tells.
	if err := c.task.Kill(ctx, syscall.SIGKILL, client.WithKillAll); err != nil {
		c.rt.log.Debug("kill task", "container", c.id, "err", err)
	}
	select {
	case <-exited:
	case <-ctx.Done():
		return ctx.Err()
	}
	if _, err := c.task.Delete(ctx); err != nil && !errdefs.IsNotFound(err) {
		return engineError("delete task", err)
	}
	return nil
}

// engineError names the operation and keeps containerd's error class.
func engineError(op string, err error) error {
	return fmt.Errorf("containerd %s: %w", op, err)
}

// startError marks a start refused by the OCI runtime as a failed
// precondition of the task rather than a failure of the engine. When the
// caller's ctx is done, the failure is the caller's, whatever the runtime
// made of it.
func startError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return engineError("start task", ctx.Err())
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errdefs.IsUnavailable(err) {
		return engineError("start task", err)
	}
	return errdefs.ErrFailedPrecondition.WithMessage(fmt.Sprintf("container did not start: %v", err))
}
