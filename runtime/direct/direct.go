// Package direct runs task containers with no engine daemon and no shim:
// it writes each container's OCI bundle itself (the spec is the
// lifecycle's, the root file system an overlay on an image of its own
// store) and runs crun, runc or runsc on it, as the containers'
// supervisor. Each container is one `OCI-RUNTIME run` process of the
// daemon's, which holds the container's stdio pipes and ends with it, its
// exit status the container's; the daemon reaps what a crash left by its
// state folder. It is the direct side of internal/sandbox/lifecycle's Port;
// the lifecycle itself is shared with the other backends.
package direct

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/sandbox/cgroup"
	"github.com/sandboxd/sandboxd/internal/sandbox/lifecycle"
	"github.com/sandboxd/sandboxd/internal/sandbox/seccomp"
	"github.com/sandboxd/sandboxd/runtime"
)

// Name is the backend's name, as Info and the daemon's --backend say it.
const Name = "direct"

// oomGrace is how long an exit by SIGKILL waits for a late OOM event:
// under cgroup v1 the watcher of the container's cgroup learns of an OOM
// on a goroutine of its own, which a loaded host may run after the exit.
const oomGrace = 200 * time.Millisecond

// Options configure a Runtime.
type Options struct {
	// StateDir is the daemon instance's own folder for its containers'
	// bundles and its OCI runtimes' state, a tmpfs (New mounts one there
	// unless the folder is on one): what Reap reads after a crash.
	StateDir string
	// ImageDir is the image store (DefaultImageDir when empty).
	ImageDir string
	// InitPath is sandboxd's init, bound into each container as PID 1.
	InitPath string
	// RunscPath, when set, offers gVisor: runsc at that path. runc and
	// crun are offered where they are on PATH.
	RunscPath string
	// CgroupRoot is where the cgroup file system is mounted (normally
	// /sys/fs/cgroup); containers get parent cgroups below CgroupParent,
	// where their limits are updated and their peak memory and OOM kills
	// read.
	CgroupRoot   string
	CgroupParent string
	// Egress links the containers of allow-listed tasks to the egress
	// gateway; nil refuses them.
	Egress runtime.EgressGateway
	// Version is the daemon's, which Info gives as the backend's: there
	// is no engine (default: the module version the binary was built as).
	Version string
	// Log receives what cannot be returned (default slog.Default()).
	Log *slog.Logger
}

// Runtime starts task containers by running an OCI runtime directly.
type Runtime struct {
	// Lifecycle starts, prepares and reaps the containers.
	*lifecycle.Lifecycle
	port *port
}

var (
	_ runtime.Runtime  = (*Runtime)(nil)
	_ runtime.Preparer = (*Runtime)(nil)
)

// New returns a Runtime with the OCI runtimes this host has. It refuses a
// host without cgroups it can write, which every container's limits need.
func New(opts Options) (_ *Runtime, err error) {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.ImageDir == "" {
		opts.ImageDir = DefaultImageDir
	}
	if opts.Version == "" {
		opts.Version = "(devel)"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
			opts.Version = bi.Main.Version
		}
	}
	if opts.StateDir == "" || opts.CgroupParent == "" {
		return nil, fmt.Errorf("the direct backend needs a state folder and a parent cgroup: %w", errdefs.ErrInvalidArgument)
	}
	h, err := cgroup.Open(opts.CgroupRoot)
	if err != nil {
		return nil, fmt.Errorf("the direct backend sets every container's limits in its cgroups: %w: %w", err, errdefs.ErrFailedPrecondition)
	}
	store, err := OpenStore(opts.ImageDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
		return nil, err
	}
	if err := onTmpfs(opts.StateDir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(containersDir(opts.StateDir), 0o700); err != nil {
		return nil, err
	}
	p := &port{opts: opts, store: store, cgroups: h, runtimes: map[string]*ociRuntime{}}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	for _, name := range []string{runtime.RuncName, runtime.CrunName, runtime.RunscName} {
		path := opts.RunscPath
		if name != runtime.RunscName {
			path, _ = exec.LookPath(name)
		} else if _, err := os.Stat(path); path != "" && err != nil {
			path = ""
		}
		if path == "" {
			continue
		}
		rt, err := newOCIRuntime(name, path, opts.StateDir)
		if err != nil {
			return nil, err
		}
		p.runtimes[name] = rt
	}
	if len(p.runtimes) == 0 {
		return nil, fmt.Errorf("the direct backend found no OCI runtime (runc, crun or runsc): %w", errdefs.ErrFailedPrecondition)
	}
	l, err := lifecycle.New(p, lifecycle.Options{InitPath: opts.InitPath, Cgroups: &h, CgroupRoot: opts.CgroupParent, OOMGrace: oomGrace, Log: opts.Log})
	if err != nil {
		return nil, err
	}
	return &Runtime{Lifecycle: l, port: p}, nil
}

// Info reports the backend and the OCI runtimes it runs. The backend's
// version is the daemon's: there is no engine.
func (r *Runtime) Info(ctx context.Context) (runtime.Info, error) {
	info := runtime.Info{Backend: Name, Version: r.port.opts.Version, DefaultRuntime: runtime.RuncName, CPUs: goruntime.NumCPU()}
	if _, ok := r.port.runtimes[runtime.RuncName]; !ok {
		info.DefaultRuntime = runtime.CrunName
	}
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err == nil {
		info.MemoryBytes = int64(si.Totalram) * int64(si.Unit)
	}
	for _, name := range []string{runtime.RuncName, runtime.CrunName, runtime.RunscName} {
		if rt, ok := r.port.runtimes[name]; ok {
			info.Runtimes = append(info.Runtimes, runtime.OCIRuntime{Name: name, Version: lifecycle.BinaryVersion(ctx, rt.path), Seccomp: seccomp.Digest(name)})
		}
	}
	return info, nil
}

// Image resolves a name, or an image's ID, to an image of the store.
func (r *Runtime) Image(_ context.Context, ref string) (runtime.Image, error) {
	return r.port.store.Image(ref)
}

// Close releases the OCI runtimes' sealed copies and removes the parent
// cgroup and the state folder (its tmpfs unmounted), which hold nothing
// once every container is removed. Another Runtime on the same folder may
// still have containers in it: then the folder stays.
func (r *Runtime) Close() error {
	errs := []error{r.Lifecycle.Close(), r.port.close()}
	err := os.Remove(containersDir(r.port.opts.StateDir))
	switch {
	case errors.Is(err, unix.ENOTEMPTY):
		return errors.Join(errs...)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return errors.Join(append(errs, err)...)
	}
	for _, rt := range r.port.runtimes {
		errs = append(errs, rt.removeRoot())
	}
	if err := os.Remove(filepath.Join(r.port.opts.StateDir, "oci")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	if mountPoint(r.port.opts.StateDir) {
		if err := unix.Unmount(r.port.opts.StateDir, unix.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmount the state folder: %w", err))
		}
	}
	if err := os.Remove(r.port.opts.StateDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// onTmpfs makes the state folder a tmpfs of its own unless it is on one
// already (/run is, on a systemd host). Each task makes and removes a
// container's folder, its bundle and its overlay's upper folder there: on
// a disk's file system that was a quarter of the daemon's CPU per task
// (ext4's inode allocation and journal), and records of containers that
// die with the boot have no business outliving it. A folder that already
// holds containers is left as it is: a tmpfs would hide them from Reap.
func onTmpfs(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return err
	}
	if st.Type == unix.TMPFS_MAGIC {
		return nil
	}
	if entries, err := os.ReadDir(containersDir(dir)); err == nil && len(entries) > 0 {
		return nil
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700"); err != nil {
		return fmt.Errorf("mount a tmpfs on the state folder %s: %w", dir, err)
	}
	return nil
}

// mountPoint says whether dir is the root of a file system of its own.
func mountPoint(dir string) bool {
	var st, parent unix.Stat_t
	return unix.Stat(dir, &st) == nil && unix.Stat(filepath.Dir(dir), &parent) == nil && st.Dev != parent.Dev
}
