// Package docker runs task containers through the Docker Engine API, with
// runc or another OCI runtime registered with the backend (runsc). It is the
// Docker side of internal/sandbox/lifecycle's Port; the lifecycle itself is
// shared with the other backends.
//
// Output is read from an attach stream opened before the container starts,
// so nothing the program prints is lost, and the backend keeps no log copy.
package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sandboxd/sandboxd/internal/sandbox/imagecache"
	"github.com/sandboxd/sandboxd/internal/sandbox/lifecycle"
	"github.com/sandboxd/sandboxd/internal/sandbox/seccomp"
	"github.com/sandboxd/sandboxd/runtime"
)

// Client is the subset of the Docker client that this backend calls.
type Client interface {
	Info(ctx context.Context) (system.Info, error)
	ImageInspect(ctx context.Context, ref string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	Events(ctx context.Context, options events.ListOptions) (<-chan events.Message, <-chan error)
	ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networkingConfig *network.NetworkingConfig, platform *ocispec.Platform, name string) (container.CreateResponse, error)
	ContainerAttach(ctx context.Context, id string, options container.AttachOptions) (types.HijackedResponse, error)
	ContainerWait(ctx context.Context, id string, condition container.WaitCondition) (<-chan container.WaitResponse, <-chan error)
	ContainerStart(ctx context.Context, id string, options container.StartOptions) error
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
	ContainerKill(ctx context.Context, id, signal string) error
	ContainerUpdate(ctx context.Context, id string, update container.UpdateConfig) (container.UpdateResponse, error)
	ContainerRemove(ctx context.Context, id string, options container.RemoveOptions) error
	ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
	NetworkCreate(ctx context.Context, name string, options network.CreateOptions) (network.CreateResponse, error)
	NetworkList(ctx context.Context, options network.ListOptions) ([]network.Summary, error)
	NetworkRemove(ctx context.Context, networkID string) error
	Close() error
}

var _ Client = (*client.Client)(nil)

// Runtime starts task containers on a Docker daemon.
type Runtime struct {
	// Lifecycle starts, prepares and reaps the containers.
	*lifecycle.Lifecycle
	client Client
	port   *port
	log    *slog.Logger
	// images is nil when the Runtime does not follow Docker's events
	// (New's): every Image inspects.
	images         *imageCache
	stopImages     context.CancelFunc
	imagesFollowed chan struct{}
}

var (
	_ runtime.Runtime  = (*Runtime)(nil)
	_ runtime.Preparer = (*Runtime)(nil)
)

// New returns a Runtime that uses c, with the lifecycle of opts.
func New(c Client, opts lifecycle.Options) (*Runtime, error) {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	e := &port{client: c, log: opts.Log}
	lc, err := lifecycle.New(e, opts)
	if err != nil {
		return nil, err
	}
	return &Runtime{Lifecycle: lc, client: c, port: e, log: opts.Log}, nil
}

// oomGrace is how long an exit by SIGKILL waits for a late OOM report:
// dockerd learns of the OOM kill from containerd's event, apart from the
// exit, and under gVisor the host's OOM killer ends the whole sandbox.
const oomGrace = 200 * time.Millisecond

// Options configure Connect.
type Options struct {
	// Host is the backend's address, DOCKER_HOST-style; empty means the
	// environment's or the default socket.
	Host string
	// InitPath is sandboxd's init on the backend's host.
	InitPath string
	// CgroupRoot is where the cgroup file system is mounted (normally
	// /sys/fs/cgroup). When the backend uses the cgroupfs driver and it is
	// readable, containers get parent cgroups below CgroupParent, so that
	// peak memory is reported.
	CgroupRoot   string
	CgroupParent string
	// Egress links the containers of allow-listed tasks to the egress
	// gateway, through a network driver served to the backend, which must
	// run on this host, at PluginDir (default DefaultPluginDir); Instance
	// names the driver and its network. Nil refuses such containers.
	Egress    runtime.EgressGateway
	Instance  string
	PluginDir string
	// Log receives what cannot be returned (default slog.Default()).
	Log *slog.Logger
}

// Connect reaches the backend of opts and returns a Runtime on it.
func Connect(ctx context.Context, opts Options) (*Runtime, error) {
	clientOpts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if opts.Host != "" {
		clientOpts = append(clientOpts, client.WithHost(opts.Host))
	}
	c, err := client.NewClientWithOpts(clientOpts...)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	info, err := c.Info(ctx)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("dockerd at %s does not answer: %w: %w", c.DaemonHost(), err, errdefs.ErrUnavailable)
	}
	lc := lifecycle.Options{InitPath: opts.InitPath, OOMGrace: oomGrace, Log: opts.Log}
	lc.UseCgroups(opts.CgroupRoot, opts.CgroupParent, cgroupDriverProblem(info.CgroupDriver))
	r, err := New(c, lc)
	if err != nil {
		c.Close()
		return nil, err
	}
	r.port.runscNetworkNone = registeredNetworkNone(info.Runtimes)
	if opts.Egress != nil {
		if r.port.egress, err = startEgressNetwork(ctx, c, opts.Egress, opts.Instance, opts.PluginDir, r.log); err != nil {
			r.Close()
			return nil, err
		}
	}
	r.followImages()
	return r, nil
}

// followImages keeps what Image inspects while Docker's image events say
// it holds (see imageCache), until Close.
func (r *Runtime) followImages() {
	ctx, cancel := context.WithCancel(context.Background())
	r.images, r.stopImages, r.imagesFollowed = &imageCache{imagecache.New()}, cancel, make(chan struct{})
	go func() {
		defer close(r.imagesFollowed)
		r.images.follow(ctx, r.client, r.log)
	}()
}

// Info reports the backend's version and OCI runtimes.
func (r *Runtime) Info(ctx context.Context) (runtime.Info, error) {
	info, err := r.client.Info(ctx)
	if err != nil {
		return runtime.Info{}, dockerError("info", err)
	}
	out := runtime.Info{Backend: "docker", Version: info.ServerVersion, DefaultRuntime: info.DefaultRuntime,
		CPUs: info.NCPU, MemoryBytes: info.MemTotal}
	for name, rt := range info.Runtimes {
		// The backend also lists containerd's shims under their own names;
		// only OCI runtimes can be asked for.
		// runscNetworkNone is runsc, registered a second way.
		if strings.HasPrefix(name, "io.containerd.") || name == runscNetworkNone {
			continue
		}
		// runsc applies the seccomp profile only with --oci-seccomp, which
		// Docker does not pass in a spec: without it runsc is not offered.
		if name == runtime.RunscName && !slices.Contains(rt.Args, lifecycle.RunscSeccompFlag) {
			r.log.Warn("Docker's runsc is registered without "+lifecycle.RunscSeccompFlag+": it would not apply the seccomp profile, and is not offered",
				"path", rt.Path, "args", rt.Args)
			continue
		}
		oci := runtime.OCIRuntime{Name: name, Seccomp: seccomp.Digest(name)}
		switch {
		case name == runtime.RuncName:
			oci.Version = r.runcVersion(ctx, info.RuncCommit.ID)
		case rt.Path != "":
			// The backend runs on this host (or shares its binaries).
			oci.Version = lifecycle.BinaryVersion(ctx, rt.Path)
		}
		out.Runtimes = append(out.Runtimes, oci)
	}
	sort.Slice(out.Runtimes, func(i, j int) bool { return out.Runtimes[i].Name < out.Runtimes[j].Name })
	return out, nil
}

// runcVersion is the version of the runc Docker runs: the set-up's pinned
// one, found on PATH as dockerd finds it, whose --version names no commit;
// with a commit, dockerd says it runs another (Debian's), and is believed.
func (r *Runtime) runcVersion(ctx context.Context, dockerCommit string) string {
	path, err := exec.LookPath(runtime.RuncName)
	if err != nil {
		return dockerCommit
	}
	v := lifecycle.BinaryVersion(ctx, path)
	if dockerCommit != "" && dockerCommit != "N/A" && !strings.Contains(v, dockerCommit) {
		return "commit " + dockerCommit
	}
	return v
}

// Image resolves ref to the image present in the backend.
func (r *Runtime) Image(ctx context.Context, ref string) (runtime.Image, error) {
	if r.images == nil {
		return r.inspectImage(ctx, ref)
	}
	return r.images.Resolve(ref, func() (runtime.Image, error) { return r.inspectImage(ctx, ref) })
}

// inspectImage asks the backend what ref is.
func (r *Runtime) inspectImage(ctx context.Context, ref string) (runtime.Image, error) {
	img, err := r.client.ImageInspect(ctx, ref)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return runtime.Image{}, fmt.Errorf("image %s is not in Docker: %w", ref, errdefs.ErrNotFound)
		}
		return runtime.Image{}, dockerError("inspect image "+ref, err)
	}
	out := runtime.Image{ID: img.ID, Ref: ref}
	if img.Config != nil {
		out.Labels, out.Env = img.Config.Labels, img.Config.Env
		for v := range img.Config.Volumes {
			out.Volumes = append(out.Volumes, v)
		}
		sort.Strings(out.Volumes)
	}
	return out, nil
}

// Close releases the client, the parent cgroup of every container, and
// the egress network.
func (r *Runtime) Close() error {
	var errs []error
	if r.stopImages != nil {
		r.stopImages()
		<-r.imagesFollowed
	}
	if n := r.port.egress; n != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		errs = append(errs, n.close(ctx, r.client))
		cancel()
	}
	return errors.Join(append(errs, r.Lifecycle.Close(), r.client.Close())...)
}

// dockerError classifies an error of Docker's, keeping its class when
// Docker gave one, and calling it unavailable when Docker did not answer.
func dockerError(op string, err error) error {
	if client.IsErrConnectionFailed(err) {
		return fmt.Errorf("docker %s: %w: %w", op, err, errdefs.ErrUnavailable)
	}
	return fmt.Errorf("docker %s: %w", op, err)
}

// cgroupDriverProblem says why dockerd's cgroup driver leaves sandboxd
// no parent cgroup of its own: under systemd's, a container's cgroup is a
// unit that goes with the container, and its peak memory with it.
func cgroupDriverProblem(driver string) error {
	if driver == "cgroupfs" {
		return nil
	}
	return fmt.Errorf("dockerd's cgroup driver is %q, not cgroupfs: run dockerd with --exec-opt native.cgroupdriver=cgroupfs, or use the direct backend", driver)
}
