// Package exec is one run's mechanics, below the engine's façade: a task's
// folders and container spec, its program started in a container of its
// own (pooled or made for it) or as a call of a session's container, its
// output streamed under caps, its end classified, its outputs collected
// and its bundle written. The façade (package task) decides what runs,
// where and when — resolution, admission, the pool, the sessions' table —
// and hands each run here as a Job and a Source.
package exec

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task/hostuid"
	"github.com/sandboxd/sandboxd/task/pool"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/taskdir"
	"github.com/sandboxd/sandboxd/task/tools"
)

// Labels that mark the containers of a daemon instance.
const (
	LabelInstance = "io.sandboxd.instance"
	LabelRun      = "io.sandboxd.run"
)

// Egress is the egress gateway of allow-listed tasks (netpolicy/gateway),
// as runs use it: an address per container, linked by the backend, and a
// task's policy bound to that address while the task runs.
type Egress interface {
	Allocate() (netip.Addr, error)
	Free(addr netip.Addr) error
	Bind(addr netip.Addr, p netpolicy.Policy) (netpolicy.Binding, error)
	// ProxyURL is what HTTP_PROXY and HTTPS_PROXY name; ResolvConf the
	// host file bound at /etc/resolv.conf.
	ProxyURL() string
	ResolvConf() string
	// TrustBundle is the host file bound over the system bundle of
	// trusted certificates of the container of addr ("" for none), when
	// the gateway Terminates TLS to add secrets.
	TrustBundle(addr netip.Addr) string
	Terminates() bool
	// Placeholders are the program's variables of the secrets names.
	Placeholders(names []string) map[string]string
}

// Config is what an Executor works with: the daemon's data and the
// collaborators of its runs. A nil collaborator does without.
type Config struct {
	// Instance names the daemon: its containers carry it as a label.
	Instance string
	// Version is sandboxd's, recorded in bundles.
	Version string
	// Tasks is the folder of the instance's task folders.
	Tasks string
	// Bounds size a task's input and code folders.
	Bounds run.Bounds
	// Output bounds what is collected from /workspace into a bundle.
	Output taskdir.OutputLimits
	// KillOutputBytes stops a run whose stdout or stderr passes it (or
	// the stream's own cap, if larger).
	KillOutputBytes int64
	// NoFile is the open-files limit of every task.
	NoFile int64

	Runtime runtime.Runtime
	Disk    taskdir.Disk
	UIDs    *hostuid.Allocator
	// Egress links allow-listed containers to the gateway; nil allows
	// none.
	Egress Egress
	// Store keeps the runs' bundles; nil keeps none.
	Store *artifacts.Store
	// Lock names the images' packages in their bundles; nil names none.
	Lock *images.LockFile
	Log  *slog.Logger
	// Tools are what programs may call, within ToolLimits; ToolAudit
	// records each call, ToolStats counts them.
	Tools      *tools.Registry
	ToolLimits tools.Limits
	ToolAudit  func(tenant, runID string, c tools.Call)
	ToolStats  *tools.Metrics
}

// Executor makes the folders and containers of runs, sessions and the
// pool on one backend, and runs programs in them.
type Executor struct {
	cfg Config
}

// New returns an Executor of cfg.
func New(cfg Config) *Executor {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Executor{cfg: cfg}
}

// Resources are the container resources of lim, with the file limit.
func (e *Executor) Resources(lim limits.Limits) runtime.Resources {
	return runtime.Resources{MemoryBytes: lim.MemoryBytes, CPUMillis: lim.CPUMillis, Pids: lim.Pids, NoFile: e.cfg.NoFile}
}

// NewFolders makes the folders of the task id, and allocates its address
// on the egress gateway's subnet when it has egress.
func (e *Executor) NewFolders(id string, diskBytes int64, egress bool) (*taskdir.Dir, error) {
	uid, err := e.cfg.UIDs.Take()
	if err != nil {
		return nil, err
	}
	b := e.cfg.Bounds
	ws, err := taskdir.Create(e.cfg.Disk, e.cfg.Tasks, id, uid, taskdir.Sizes{Disk: diskBytes, Input: b.FilesBytes, InputFiles: b.Files, Code: b.CodeBytes})
	if err != nil {
		e.cfg.UIDs.Give(uid)
		return nil, err
	}
	ws.OnRemove(func() error { e.cfg.UIDs.Give(uid); return nil })
	if !egress {
		return ws, nil
	}
	if e.cfg.Egress == nil {
		return nil, errors.Join(errors.New("no egress gateway for an allow-listed task"), ws.Remove())
	}
	if ws.Egress, err = e.cfg.Egress.Allocate(); err != nil {
		return nil, errors.Join(err, ws.Remove())
	}
	addr := ws.Egress
	ws.OnRemove(func() error { return e.cfg.Egress.Free(addr) })
	return ws, nil
}

// ContainerSpec is what every task's container has, pooled or made for
// it: its name, labels, user, host name, task folder, /tmp, limits, and
// its link to the egress gateway with the gateway as DNS server.
func (e *Executor) ContainerSpec(id, image, ociRuntime string, ws *taskdir.Dir, lim limits.Limits) runtime.Spec {
	spec := runtime.Spec{
		ID:       e.cfg.Instance + "-" + id,
		Image:    image,
		Runtime:  ociRuntime,
		User:     fmt.Sprintf("%d:%d", ws.UID, ws.UID),
		Hostname: sandboxHostname,
		Labels:   map[string]string{LabelInstance: e.cfg.Instance, LabelRun: id},
		Mounts: []runtime.Mount{
			{Source: ws.Path(taskdir.Workspace), Target: run.WorkspaceDir},
			{Source: ws.Path(taskdir.Input), Target: run.InputDir, ReadOnly: true},
			{Source: ws.Path(taskdir.Code), Target: images.CodeDir, ReadOnly: true},
		},
		Tmpfs:      []runtime.Tmpfs{{Target: "/tmp", SizeBytes: lim.DiskBytes}},
		ControlDir: ws.Path(taskdir.Control),
		Resources:  e.Resources(lim),
		Egress:     ws.Egress,
	}
	if ws.Egress.IsValid() {
		spec.Mounts = append(spec.Mounts, runtime.Mount{Source: e.cfg.Egress.ResolvConf(), Target: "/etc/resolv.conf", ReadOnly: true})
		if bundle := e.cfg.Egress.TrustBundle(ws.Egress); bundle != "" {
			spec.Mounts = append(spec.Mounts, runtime.Mount{Source: bundle, Target: TrustBundlePath, ReadOnly: true})
		}
	}
	return spec
}

// sandboxHostname is every sandbox's host name, the same for every run so
// that a replay sees the one the run saw.
const sandboxHostname = "sandbox"

// inWorkspace is the path of abs, a folder in /workspace, relative to
// /workspace.
func inWorkspace(abs string) string { return strings.TrimPrefix(abs, run.WorkspaceDir) }

// DirFiles are a request's files as the task's folders take them.
func DirFiles(files []run.File) []taskdir.File {
	out := make([]taskdir.File, len(files))
	for i, f := range files {
		out[i] = taskdir.File{Path: f.Path, Content: f.Content, Executable: f.Executable}
	}
	return out
}

// packagesOf is what the lock says dpkg installed in the image name of
// digest, or nothing when the lock does not know it (an --allow-image
// digest).
func (e *Executor) packagesOf(name, digest string) []images.Package {
	if e.cfg.Lock == nil {
		return nil
	}
	lock, err := e.cfg.Lock.Lock()
	if im, ok := lock.Entry(name); err == nil && ok && im.Digest == digest {
		return im.Packages
	}
	return nil
}

// Warm is a pooled container to make: its id, its key, its image by
// catalog name, the limits it starts with, and the interpreter it
// pre-starts with env (nil: none; the task then brings its own).
type Warm struct {
	ID        string
	Key       pool.Key
	ImageName string
	Limits    limits.Limits
	Prestart  *runtime.Prestart
	Env       []string
}

// PrepareWarm makes a pooled container: its folders, and its container
// prepared with the init waiting in /workspace for its one task.
func (e *Executor) PrepareWarm(ctx context.Context, w Warm) (*pool.Warm, error) {
	prep, ok := e.cfg.Runtime.(runtime.Preparer)
	if !ok {
		return nil, errdefs.ErrFailedPrecondition.WithMessage("this backend cannot prepare containers")
	}
	ws, err := e.NewFolders(w.ID, w.Limits.DiskBytes, w.Key.Egress)
	if err != nil {
		return nil, err
	}
	spec := e.ContainerSpec(w.ID, w.Key.Image, w.Key.Runtime, ws, w.Limits)
	spec.Env, spec.WorkingDir, spec.Prestart = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}, run.WorkspaceDir, w.Prestart
	if w.Prestart != nil {
		spec.Env = w.Env
	}
	ctr, err := prep.Prepare(ctx, spec)
	if err != nil {
		return nil, errors.Join(err, ws.Remove())
	}
	return &pool.Warm{ID: w.ID, Key: w.Key, ImageName: w.ImageName, Dir: ws, Container: ctr, Prestart: w.Prestart}, nil
}
