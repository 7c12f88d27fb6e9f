// Package docker runs task containers through the Docker Engine API, with
// runc or another OCI runtime registered with the engine (runsc).
//
// Output is read from an attach stream opened before the container starts,
// so nothing the program prints is lost, and the engine keeps no log copy.
package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sandboxd/sandboxd/internal/cgroup"
	"github.com/sandboxd/sandboxd/internal/launch"
	"github.com/sandboxd/sandboxd/runtime"
)

// Client is the subset of the Docker client that this backend calls.
type Client interface {
	Info(ctx context.Context) (system.Info, error)
	ImageInspect(ctx context.Context, ref string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networkingConfig *network.NetworkingConfig, platform *ocispec.Platform, name string) (container.CreateResponse, error)
	ContainerAttach(ctx context.Context, id string, options container.AttachOptions) (types.HijackedResponse, error)
	ContainerWait(ctx context.Context, id string, condition container.WaitCondition) (<-chan container.WaitResponse, <-chan error)
	ContainerStart(ctx context.Context, id string, options container.StartOptions) error
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
	ContainerKill(ctx context.Context, id, signal string) error
	ContainerUpdate(ctx context.Context, id string, update container.UpdateConfig) (container.UpdateResponse, error)
	ContainerRemove(ctx context.Context, id string, options container.RemoveOptions) error
	ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
	Close() error
}

var _ Client = (*client.Client)(nil)

// Runtime starts task containers on a Docker engine.
type Runtime struct {
	client     Client
	initPath   string
	namePrefix string
	cgroups    *cgroup.Hierarchy
	cgroupRoot string
	log        *slog.Logger
}

var (
	_ runtime.Runtime  = (*Runtime)(nil)
	_ runtime.Preparer = (*Runtime)(nil)
)

// Option configures a Runtime.
type Option func(*Runtime)

// WithCgroups puts every container under a parent cgroup of its own below
// root (for example /sandboxd/INSTANCE) in h, so that its peak memory can be
// read once it has exited. It needs an engine on the cgroupfs driver.
func WithCgroups(h cgroup.Hierarchy, root string) Option {
	return func(r *Runtime) {
		r.cgroups = &h
		r.cgroupRoot = root
	}
}

// WithNamePrefix sets the prefix of container names (default "sandboxd-").
func WithNamePrefix(prefix string) Option {
	return func(r *Runtime) { r.namePrefix = prefix }
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(r *Runtime) { r.log = l }
}

// New returns a Runtime that uses c, with the init at initPath (on the
// engine's host) as PID 1 of every container.
func New(c Client, initPath string, opts ...Option) *Runtime {
	r := &Runtime{client: c, initPath: initPath, namePrefix: "sandboxd-", log: slog.Default()}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Connect reaches the engine at host (a DOCKER_HOST-style address; empty
// means the environment's or the default socket) and returns a Runtime on
// it, with the init at initPath. When the engine uses the cgroupfs driver
// and cgroupRoot (normally /sys/fs/cgroup) is readable, containers get
// parent cgroups below cgroupParent so that peak memory is reported.
func Connect(ctx context.Context, host, initPath, cgroupRoot, cgroupParent string, opts ...Option) (*Runtime, error) {
	if err := checkInit(initPath); err != nil {
		return nil, err
	}
	clientOpts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if host != "" {
		clientOpts = append(clientOpts, client.WithHost(host))
	}
	c, err := client.NewClientWithOpts(clientOpts...)
	if err != nil {
		return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("docker client: %v", err))
	}
	info, err := c.Info(ctx)
	if err != nil {
		c.Close()
		return nil, errdefs.ErrUnavailable.WithMessage(fmt.Sprintf("docker engine at %s does not answer: %v", c.DaemonHost(), err))
	}
	if info.CgroupDriver == "cgroupfs" {
		if h, err := cgroup.Open(cgroupRoot); err == nil {
			opts = append([]Option{WithCgroups(h, cgroupParent)}, opts...)
		}
	}
	return New(c, initPath, opts...), nil
}

// checkInit refuses a missing init before any container needs it.
func checkInit(path string) error {
	if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
		return errdefs.ErrFailedPrecondition.WithMessage(fmt.Sprintf("sandboxd's init %s is missing (make build builds it): %v", path, err))
	}
	return nil
}

// Info reports the engine's version and OCI runtimes.
func (r *Runtime) Info(ctx context.Context) (runtime.Info, error) {
	info, err := r.client.Info(ctx)
	if err != nil {
		return runtime.Info{}, engineError("info", err)
	}
	out := runtime.Info{Backend: "docker", Version: info.ServerVersion, DefaultRuntime: info.DefaultRuntime}
	for name, rt := range info.Runtimes {
		// The engine also lists containerd's shims under their own names;
		// only OCI runtimes can be asked for.
		if strings.HasPrefix(name, "io.containerd.") {
			continue
		}
		oci := runtime.OCIRuntime{Name: name}
		switch {
		case name == "runc":
			oci.Version = info.RuncCommit.ID
		case rt.Path != "":
			// The engine runs on this host (or shares its binaries).
			oci.Version = runtime.BinaryVersion(ctx, rt.Path)
		}
		out.Runtimes = append(out.Runtimes, oci)
	}
	sort.Slice(out.Runtimes, func(i, j int) bool { return out.Runtimes[i].Name < out.Runtimes[j].Name })
	return out, nil
}

// Image resolves ref to the image present in the engine.
func (r *Runtime) Image(ctx context.Context, ref string) (runtime.Image, error) {
	img, err := r.client.ImageInspect(ctx, ref)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return runtime.Image{}, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("image %s is not in the docker engine", ref))
		}
		return runtime.Image{}, engineError("inspect image "+ref, err)
	}
	var labels map[string]string
	if img.Config != nil {
		labels = img.Config.Labels
	}
	return runtime.Image{ID: img.ID, Ref: ref, Labels: labels}, nil
}

// createTimeout bounds creating a container, which callers cannot cancel.
const createTimeout = time.Minute

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

func (r *Runtime) create(ctx context.Context, spec runtime.Spec) (*dockerContainer, error) {
	c := &dockerContainer{rt: r, name: r.namePrefix + spec.ID, copied: make(chan struct{}), runtime: spec.Runtime, resources: spec.Resources}
	if r.cgroups != nil {
		c.cgroup = path.Join(r.cgroupRoot, c.name)
	}
	// Creating is not cut short by the caller: dockerd goes on creating a
	// container whose client has gone, and nobody would know its ID. It
	// runs to the end, bounded by its own timeout, and a cancelled caller
	// then gets the ordinary teardown below.
	createCtx, cancelCreate := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
	created, err := r.client.ContainerCreate(createCtx, containerConfig(spec), hostConfig(spec, r.initPath, c.cgroup), &network.NetworkingConfig{}, nil, c.name)
	cancelCreate()
	if err != nil {
		return nil, engineError("create container", err)
	}
	c.id = created.ID
	if err := c.start(ctx); err != nil {
		c.removeAfterFailure(ctx)
		return nil, err
	}
	return c, nil
}

// removeAfterFailure removes a container that failed to start or launch.
// The caller's context may be what failed; cleaning up must not.
func (c *dockerContainer) removeAfterFailure(ctx context.Context) {
	rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := c.Remove(rmCtx); err != nil {
		c.rt.log.Warn("remove container after failed start", "container", c.name, "err", err)
	}
}

// Reap removes every container that carries all of labels, and the parent
// cgroups that no container uses any more.
func (r *Runtime) Reap(ctx context.Context, labels map[string]string) (int, error) {
	args := filters.NewArgs()
	for k, v := range labels {
		args.Add("label", k+"="+v)
	}
	list, err := r.client.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
	if err != nil {
		return 0, engineError("list containers", err)
	}
	var errs []error
	removed := 0
	for _, s := range list {
		err := r.client.ContainerRemove(ctx, s.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, engineError("remove container "+s.ID, err))
			continue
		}
		removed++
	}
	if r.cgroups != nil {
		children, err := r.cgroups.Children(r.cgroupRoot)
		if err != nil {
			errs = append(errs, err)
		}
		for _, name := range children {
			// A cgroup still in use belongs to a live container that
			// does not carry these labels; leave it.
			_ = r.cgroups.Remove(path.Join(r.cgroupRoot, name))
		}
	}
	return removed, errors.Join(errs...)
}

// Close releases the client and removes this runtime's parent cgroup, which
// holds nothing once every container is removed.
func (r *Runtime) Close() error {
	var errs []error
	if r.cgroups != nil {
		errs = append(errs, r.cgroups.Remove(r.cgroupRoot))
	}
	errs = append(errs, r.client.Close())
	return errors.Join(errs...)
}

// dockerContainer is one container started by Runtime.
type dockerContainer struct {
	rt        *Runtime
	id        string
	name      string
	cgroup    string
	runtime   string
	resources runtime.Resources // as created; Launch updates them
	// launchedAt is when Launch gave the container its task, and report
	// watches its output for the init's exit report.
	launchedAt time.Time
	report     *launch.Report

	attach     types.HijackedResponse
	copied     chan struct{}   // closed when the output copy has ended
	exited     chan engineExit // the engine's word on the exit; buffered
	cancelWait context.CancelFunc

	mu   sync.Mutex
	exit *runtime.Exit
}

func (c *dockerContainer) ID() string { return c.name }

// start attaches to the created container, registers for its exit, and
// starts it. Its output is copied from Launch on: the init writes nothing
// before it has its task.
func (c *dockerContainer) start(ctx context.Context) error {
	var err error
	c.attach, err = c.rt.client.ContainerAttach(ctx, c.id, container.AttachOptions{
		Stream: true, Stdin: true, Stdout: true, Stderr: true,
	})
	if err != nil {
		close(c.copied)
		return engineError("attach container", err)
	}
	// The exit must be registered before the start, or a fast program's
	// exit is missed. It outlives ctx: Wait and Remove bound it.
	waitCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancelWait = cancel
	c.exited = make(chan engineExit, 1)
	go c.awaitExit(c.rt.client.ContainerWait(waitCtx, c.id, container.WaitConditionNextExit))
	if err := c.rt.client.ContainerStart(ctx, c.id, container.StartOptions{}); err != nil {
		return startError(ctx, err)
	}
	return nil
}

// engineExit is the engine's answer to a wait for a container's exit.
type engineExit struct{ err error }

// awaitExit passes the engine's answer on to c.exited, which holds it until
// Wait asks, if it ever does: the client's channels are unbuffered, and a
// wait that ended on the exit report never asks.
func (c *dockerContainer) awaitExit(resp <-chan container.WaitResponse, errs <-chan error) {
	select {
	case r := <-resp:
		var err error
		if r.Error != nil && r.Error.Message != "" {
			err = errors.New(r.Error.Message)
		}
		c.exited <- engineExit{err: err}
	case err := <-errs:
		c.exited <- engineExit{err: err}
	}
}

// copyOutput copies the attach stream through the report to the task's
// writers until it ends.
func (c *dockerContainer) copyOutput(report *launch.Report) {
	defer close(c.copied)
	defer report.Flush()
	// StdCopy's buffer is bounded by the engine's frame size; the writers
	// never fail, so this ends only at the stream's end.
	if _, err := stdcopy.StdCopy(report.Stdout(), report.Stderr(), c.attach.Reader); err != nil && !errors.Is(err, io.EOF) {
		c.rt.log.Debug("output copy ended", "container", c.name, "err", err)
	}
}

// copyStdin copies r to the program's stdin and closes it at the end.
func (c *dockerContainer) copyStdin(r io.Reader) {
	if _, err := io.Copy(c.attach.Conn, r); err != nil {
		c.rt.log.Debug("stdin copy ended", "container", c.name, "err", err)
	}
	_ = c.attach.CloseWrite()
}

// Launch gives the container its task.
func (c *dockerContainer) Launch(ctx context.Context, task runtime.Task) error {
	if task.Resources != c.resources {
		cgroupPids, _ := runtime.PidsLimits(c.runtime, task.Resources.Pids)
		r := task.Resources
		_, err := c.rt.client.ContainerUpdate(ctx, c.id, container.UpdateConfig{Resources: container.Resources{
			Memory: r.MemoryBytes, MemorySwap: r.MemoryBytes, NanoCPUs: r.CPUMillis * 1_000_000, PidsLimit: &cgroupPids,
		}})
		if err != nil {
			return engineError("update container", err)
		}
		c.resources = r
	}
	report, err := launch.NewReport(task.Stdout, task.Stderr)
	if err != nil {
		return err
	}
	_, nproc := runtime.PidsLimits(c.runtime, task.Resources.Pids)
	stdin, err := launch.Input(launch.Spec{Argv: task.Argv, Env: task.Env, Dir: task.WorkingDir, Nproc: nproc, Report: report.Token()}, task.Stdin)
	if err != nil {
		return err
	}
	c.report = report
	go c.copyOutput(report)
	c.launchedAt = time.Now()
	go c.copyStdin(stdin)
	return nil
}

// outputGrace bounds how long Wait waits for the attach stream to drain
// after the container has exited.
const outputGrace = 2 * time.Second

// Wait blocks until the program has ended and its output is copied: until
// the init's exit report, or the engine's word.
func (c *dockerContainer) Wait(ctx context.Context) (runtime.Exit, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.exit != nil {
		return *c.exit, nil
	}
	reported, word, err := runtime.AwaitExit(ctx, c.exited, c.report, c.launchedAt, c.rt.cgroups, c.cgroup)
	switch {
	case err != nil:
		return runtime.Exit{}, err
	case reported != nil:
		c.exit = reported
		return *reported, nil
	case word.err != nil:
		return runtime.Exit{}, engineError("wait for container", word.err)
	}
	select {
	case <-c.copied:
	case <-time.After(outputGrace):
		c.rt.log.Warn("output stream did not end after exit; closing it", "container", c.name)
		c.attach.Close()
		<-c.copied
	}
	inspect, err := c.rt.client.ContainerInspect(ctx, c.id)
	if err != nil {
		return runtime.Exit{}, engineError("inspect container", err)
	}
	exit := runtime.Exit{}
	if st := inspect.State; st != nil {
		exit.Code = st.ExitCode
		exit.OOMKilled = st.OOMKilled
		exit.StartedAt, _ = time.Parse(time.RFC3339Nano, st.StartedAt)
		exit.FinishedAt, _ = time.Parse(time.RFC3339Nano, st.FinishedAt)
	}
	if !c.launchedAt.IsZero() {
		// The container started before its program, long before when
		// pooled.
		exit.StartedAt = c.launchedAt
	}
	if c.cgroup != "" {
		if peak, err := c.rt.cgroups.PeakMemory(c.cgroup); err == nil {
			exit.PeakMemoryBytes = peak
		} else {
			c.rt.log.Debug("peak memory unknown", "container", c.name, "err", err)
		}
	}
	c.exit = &exit
	return exit, nil
}

// Kill sends SIGKILL to the container's init, which takes every process of
// its PID namespace with it.
func (c *dockerContainer) Kill(ctx context.Context) error {
	err := c.rt.client.ContainerKill(ctx, c.id, "KILL")
	if err != nil && !errdefs.IsNotFound(err) && !errdefs.IsConflict(err) {
		return engineError("kill container", err)
	}
	return nil
}

// Remove force-removes the container and its parent cgroup.
func (c *dockerContainer) Remove(ctx context.Context) error {
	var errs []error
	err := c.rt.client.ContainerRemove(ctx, c.id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !errdefs.IsNotFound(err) {
		errs = append(errs, engineError("remove container", err))
	}
	if c.attach.Conn != nil {
		c.attach.Close()
	}
	if c.cancelWait != nil {
		c.cancelWait()
	}
	if c.cgroup != "" && len(errs) == 0 {
		if err := c.rt.cgroups.Remove(c.cgroup); err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", c.cgroup, err))
		}
	}
	return errors.Join(errs...)
}

// engineError classifies an error of the engine, keeping its class when the
// engine gave one, and calling it unavailable when the engine did not answer.
func engineError(op string, err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("docker %s: %w", op, err)
	case client.IsErrConnectionFailed(err):
		return errdefs.ErrUnavailable.WithMessage(fmt.Sprintf("docker %s: %v", op, err))
	}
	return fmt.Errorf("docker %s: %w", op, err)
}

// startError marks a start refused by the OCI runtime (a missing working
// folder, an unusable image) as a failed precondition of the task rather than
// a failure of the engine. When the caller's ctx is done, the failure is the
// caller's, whatever the runtime made of it.
func startError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return engineError("start container", ctx.Err())
	}
	if client.IsErrConnectionFailed(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return engineError("start container", err)
	}
	return errdefs.ErrFailedPrecondition.WithMessage(fmt.Sprintf("container did not start: %v", err))
}
