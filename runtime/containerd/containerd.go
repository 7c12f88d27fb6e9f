// Package containerd runs task containers through the containerd API,
// without Docker: it builds each container's OCI spec itself,
// runs runc through containerd's runc shim, and runsc through the same shim
// with runsc as its binary. It is the containerd side of
// internal/sandbox/lifecycle's Port; the lifecycle itself is shared with the
// other backends. Images come from the same offline builds, imported into
// containerd's namespace by the set-up.
package containerd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	goruntime "runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/events"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/sandbox/imagecache"
	"github.com/sandboxd/sandboxd/internal/sandbox/lifecycle"
	"github.com/sandboxd/sandboxd/internal/sandbox/seccomp"
	"github.com/sandboxd/sandboxd/runtime"
)

// Client is the subset of the containerd client that this backend calls.
type Client interface {
	Version(ctx context.Context) (client.Version, error)
	GetImage(ctx context.Context, ref string) (client.Image, error)
	ListImages(ctx context.Context, filters ...string) ([]client.Image, error)
	NewContainer(ctx context.Context, id string, opts ...client.NewContainerOpts) (client.Container, error)
	SnapshotService(snapshotterName string) snapshots.Snapshotter
	Containers(ctx context.Context, filters ...string) ([]client.Container, error)
	Subscribe(ctx context.Context, filters ...string) (<-chan *events.Envelope, <-chan error)
	EventService() client.EventService
	Close() error
}

var _ Client = (*client.Client)(nil)

const (
	shim        = "io.containerd.runc.v2"
	snapshotter = "overlayfs"
	// labelNetns records a container's network namespace, so that Reap
	// can unpin it.
	labelNetns = "io.sandboxd.containerd.netns"
	// oomGrace is how long an exit by SIGKILL waits for a late OOM event:
	// the shim reports the kill and the exit on separate paths.
	oomGrace = 200 * time.Millisecond
)

// Runtime starts task containers on containerd.
type Runtime struct {
	// Lifecycle starts, prepares and reaps the containers.
	*lifecycle.Lifecycle
	port *port
}

var (
	_ runtime.Runtime  = (*Runtime)(nil)
	_ runtime.Preparer = (*Runtime)(nil)
)

// Options configure a Runtime.
type Options struct {
	// Address is containerd's socket (Connect only).
	Address string
	// Namespace is the containerd namespace of images and containers.
	Namespace string
	// InitPath is sandboxd's init, bound into each container as PID 1.
	InitPath string
	// NetnsDir is where the containers' network namespaces are pinned.
	NetnsDir string
	// FIFODir holds the containers' stdio FIFOs, which containerd's shim
	// opens by path: a folder it sees at the same path (when sandboxd runs
	// in a container of its own). Empty means containerd's default.
	FIFODir string
	// RunscPath, when set, offers gVisor: runsc at that path, with its
	// state below RunscRoot.
	RunscPath string
	RunscRoot string
	// CgroupRoot is where the cgroup file system is mounted (normally
	// /sys/fs/cgroup). When it is readable, containers get parent cgroups
	// below CgroupParent, so that peak memory is reported.
	CgroupRoot   string
	CgroupParent string
	// Egress links the containers of allow-listed tasks to the egress
	// gateway; nil refuses them.
	Egress runtime.EgressGateway
	// Log receives what cannot be returned (default slog.Default()).
	Log *slog.Logger
}

// New returns a Runtime on c.
func New(c Client, opts Options) (*Runtime, error) {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	e := &port{client: c, opts: opts, images: map[string]string{}, configs: map[digest.Digest]imageConfig{},
		oom: newOOMWatch(c, opts.Namespace, opts.Log), resolved: imageEvents{cache: imagecache.New()}}
	// containerd's runc shim runs crun in runc's place when told its path;
	// runc's it is told too, so that the runc whose version Info reports
	// (the set-up's pinned one, ahead on PATH) is the runc that runs.
	if path, err := exec.LookPath(runtime.CrunName); err == nil {
		e.crunPath = path
	}
	if path, err := exec.LookPath(runtime.RuncName); err == nil {
		e.runcPath = path
	}
	lc := lifecycle.Options{InitPath: opts.InitPath, OOMGrace: oomGrace, Log: opts.Log}
	lc.UseCgroups(opts.CgroupRoot, opts.CgroupParent, nil)
	l, err := lifecycle.New(e, lc)
	if err != nil {
		return nil, err
	}
	return &Runtime{Lifecycle: l, port: e}, nil
}

// Connect reaches containerd at opts.Address and returns a Runtime on it.
func Connect(ctx context.Context, opts Options) (*Runtime, error) {
	c, err := client.New(opts.Address, client.WithDefaultNamespace(opts.Namespace), client.WithTimeout(10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("containerd at %s does not answer: %w: %w", opts.Address, err, errdefs.ErrUnavailable)
	}
	if _, err := c.Version(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("containerd at %s does not answer: %w: %w", opts.Address, err, errdefs.ErrUnavailable)
	}
	r, err := New(c, opts)
	if err != nil {
		c.Close()
		return nil, err
	}
	return r, nil
}

// Info reports containerd's version and the runtimes it can run.
func (r *Runtime) Info(ctx context.Context) (runtime.Info, error) {
	e := r.port
	v, err := e.client.Version(e.ns(ctx))
	if err != nil {
		return runtime.Info{}, containerdError("version", err)
	}
	// containerd is reached on a local socket: its host is this one.
	info := runtime.Info{Backend: "containerd", Version: v.Version, DefaultRuntime: "runc", CPUs: goruntime.NumCPU()}
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err == nil {
		info.MemoryBytes = int64(si.Totalram) * int64(si.Unit)
	}
	if e.runcPath != "" {
		info.Runtimes = append(info.Runtimes, runtime.OCIRuntime{Name: runtime.RuncName, Version: lifecycle.BinaryVersion(ctx, e.runcPath), Seccomp: seccomp.Digest(runtime.RuncName)})
	}
	if e.crunPath != "" {
		info.Runtimes = append(info.Runtimes, runtime.OCIRuntime{Name: runtime.CrunName, Version: lifecycle.BinaryVersion(ctx, e.crunPath), Seccomp: seccomp.Digest(runtime.CrunName)})
	}
	if e.opts.RunscPath != "" {
		if _, err := os.Stat(e.opts.RunscPath); err == nil {
			info.Runtimes = append(info.Runtimes, runtime.OCIRuntime{Name: runtime.RunscName, Version: lifecycle.BinaryVersion(ctx, e.opts.RunscPath), Seccomp: seccomp.Digest(runtime.RunscName)})
		}
	}
	return info, nil
}

// Image resolves a name, or the digest of an image's config (its ID, the
// same as Docker's image ID), to an image in containerd's namespace; what
// it resolved is kept while the image events say it holds (imageEvents).
func (r *Runtime) Image(ctx context.Context, ref string) (runtime.Image, error) {
	r.port.resolved.start(r.port)
	return r.port.resolved.cache.Resolve(ref, func() (runtime.Image, error) { return r.image(ctx, ref) })
}

// image looks ref up in containerd.
func (r *Runtime) image(ctx context.Context, ref string) (runtime.Image, error) {
	img, err := r.port.lookup(ctx, ref)
	if err != nil {
		return runtime.Image{}, err
	}
	cfg, err := r.port.config(ctx, img)
	if err != nil {
		return runtime.Image{}, err
	}
	r.port.remember(cfg.id, img.Name())
	return runtime.Image{ID: cfg.id, Ref: ref, Labels: maps.Clone(cfg.labels), Env: slices.Clone(cfg.env), Volumes: slices.Clone(cfg.volumes)}, nil
}

// imageConfig is what Image reads from an image's config, and the chain ID
// of its layers: the snapshot its containers' snapshots are made on.
type imageConfig struct {
	id      string
	labels  map[string]string
	env     []string
	volumes []string
	chain   string
}

// keptConfigs bounds the configs a daemon keeps: one per image it ran,
// and per rebuild of one.
const keptConfigs = 64

// config reads img's config, or takes it from an earlier read of the same
// target: content at a digest never changes, so a name that moved finds
// its new target's, never a stale one. Reading it is four or five calls
// to containerd's content store, ~2.5 ms of every run here, where looking
// the name up is one.
func (e *port) config(ctx context.Context, img client.Image) (imageConfig, error) {
	target := img.Target().Digest
	e.mu.Lock()
	cfg, ok := e.configs[target]
	e.mu.Unlock()
	if ok {
		return cfg, nil
	}
	ctx = e.ns(ctx)
	desc, err := img.Config(ctx)
	if err != nil {
		return imageConfig{}, containerdError("image config", err)
	}
	spec, err := img.Spec(ctx)
	if err != nil {
		return imageConfig{}, containerdError("image spec", err)
	}
	cfg = imageConfig{id: desc.Digest.String(), labels: spec.Config.Labels, env: spec.Config.Env, chain: identity.ChainID(spec.RootFS.DiffIDs).String()}
	for v := range spec.Config.Volumes {
		cfg.volumes = append(cfg.volumes, v)
	}
	sort.Strings(cfg.volumes)
	e.mu.Lock()
	if len(e.configs) >= keptConfigs {
		clear(e.configs)
	}
	e.configs[target] = cfg
	e.mu.Unlock()
	return cfg, nil
}

// Close ends the OOM events' subscription, releases the client, and
// removes the parent cgroup of every container and the network namespace
// and FIFO folders, which hold nothing once every container is removed.
func (r *Runtime) Close() error {
	errs := []error{r.Lifecycle.Close()}
	r.port.oom.close()
	r.port.resolved.close()
	for _, dir := range []string{r.port.opts.NetnsDir, r.port.opts.FIFODir} {
		if dir == "" {
			continue
		}
		if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	errs = append(errs, r.port.client.Close())
	return errors.Join(errs...)
}

// containerdError names the operation and keeps containerd's error class.
func containerdError(op string, err error) error {
	return fmt.Errorf("containerd %s: %w", op, err)
}

// port is the lifecycle's Port on containerd.
type port struct {
	client Client
	opts   Options
	// crunPath and runcPath are crun's and runc's, when this host has
	// them.
	crunPath, runcPath string
	// crunPrograms are the seccomp programs crun compiled, to give it back.
	crunPrograms seccomp.CrunPrograms
	// shimGroups makes each shim group's first task, and deletes its last,
	// alone.
	shimGroups shimGroups
	// oom tells containers of their OOM kills.
	oom *oomWatch
	// resolved keeps what Image resolved.
	resolved imageEvents

	mu     sync.Mutex
	images map[string]string // config digest -> image name
	// configs are the images' configs read, by the digest of their target.
	configs map[digest.Digest]imageConfig
}

var _ lifecycle.Port = (*port)(nil)

func (e *port) ns(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, e.opts.Namespace)
}

func (e *port) remember(id, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.images[id] = name
}

// lookup finds an image by name or by the digest of its config, which
// every container's creation names: the check reads the config kept by
// target (see config) when there is one.
func (e *port) lookup(ctx context.Context, ref string) (client.Image, error) {
	ctx = e.ns(ctx)
	if strings.HasPrefix(ref, "sha256:") {
		e.mu.Lock()
		name, ok := e.images[ref]
		e.mu.Unlock()
		if ok {
			if img, err := e.client.GetImage(ctx, name); err == nil {
				if cfg, err := e.config(ctx, img); err == nil && cfg.id == ref {
					return img, nil
				}
			}
		}
		list, err := e.client.ListImages(ctx)
		if err != nil {
			return nil, containerdError("list images", err)
		}
		for _, candidate := range list {
			if cfg, err := e.config(ctx, candidate); err == nil && cfg.id == ref {
				e.remember(ref, candidate.Name())
				return candidate, nil
			}
		}
	} else {
		named, err := reference.ParseDockerRef(ref)
		if err != nil {
			return nil, fmt.Errorf("image %q: %w: %w", ref, err, errdefs.ErrInvalidArgument)
		}
		img, err := e.client.GetImage(ctx, named.String())
		if err == nil {
			return img, nil
		}
		if !errdefs.IsNotFound(err) {
			return nil, containerdError("get image", err)
		}
	}
	return nil, fmt.Errorf("image %s is not in containerd's namespace %s: %w", ref, e.opts.Namespace, errdefs.ErrNotFound)
}
