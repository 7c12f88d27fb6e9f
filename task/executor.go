package task

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task/hostuid"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/taskdir"
	"github.com/sandboxd/sandboxd/task/tools"
)

// executor makes the containers of runs and of the pool on the service's
// runtime: their folders and their specs. It holds what runs need of the
// service, and nothing of its admission, registry or pool.
type executor struct {
	rt   runtime.Runtime
	disk taskdir.Disk
	uids *hostuid.Allocator
	// egress links allow-listed containers to the gateway; nil without.
	egress Egress
	tasks  string // StateDir/tasks/INSTANCE
	// store keeps the runs' bundles; nil keeps none.
	store *artifacts.Store
	// lock names the images' packages in their bundles; nil names none.
	lock *images.LockFile
	cfg  Config
	log  *slog.Logger
	// tools are what programs may call, nil for none; toolAudit records
	// each call (see toolRun).
	tools      *tools.Registry
	toolLimits tools.Limits
	toolAudit  func(tenant, runID string, c tools.Call)
	toolStats  *tools.Metrics
}

// newWorkspace makes the folders of the task id, and allocates its
// address on the egress gateway's subnet when it has egress.
func (e *executor) newWorkspace(id string, diskBytes int64, egress bool) (*taskdir.Dir, error) {
	uid, err := e.uids.Take()
	if err != nil {
		return nil, err
	}
	b := e.cfg.Bounds
	ws, err := taskdir.Create(e.disk, e.tasks, id, uid, taskdir.Sizes{Disk: diskBytes, Input: b.FilesBytes, InputFiles: b.Files, Code: b.CodeBytes})
	if err != nil {
		e.uids.Give(uid)
		return nil, err
	}
	ws.OnRemove(func() error { e.uids.Give(uid); return nil })
	if !egress {
		return ws, nil
	}
	if e.egress == nil {
		return nil, errors.Join(errors.New("no egress gateway for an allow-listed task"), ws.Remove())
	}
	if ws.Egress, err = e.egress.Allocate(); err != nil {
		return nil, errors.Join(err, ws.Remove())
	}
	addr := ws.Egress
	ws.OnRemove(func() error { return e.egress.Free(addr) })
	return ws, nil
}

// containerSpec is what every task's container has, pooled or made for
// it: its name, labels, user, host name, task folder, /tmp, limits, and
// its link to the egress gateway with the gateway as DNS server.
func (e *executor) containerSpec(id, image, ociRuntime string, ws *taskdir.Dir, lim limits.Limits) runtime.Spec {
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
		Resources:  e.cfg.resources(lim),
		Egress:     ws.Egress,
	}
	if ws.Egress.IsValid() {
		spec.Mounts = append(spec.Mounts, runtime.Mount{Source: e.egress.ResolvConf(), Target: "/etc/resolv.conf", ReadOnly: true})
	}
	return spec
}

// sandboxHostname is every sandbox's host name, the same for every run so
// that a replay sees the one the run saw.
const sandboxHostname = "sandbox"

// inWorkspace is the path of abs, a folder in /workspace, relative to
// /workspace.
func inWorkspace(abs string) string { return strings.TrimPrefix(abs, run.WorkspaceDir) }

// dirFiles are a request's files as the task's folders take them.
func dirFiles(files []run.File) []taskdir.File {
	out := make([]taskdir.File, len(files))
	for i, f := range files {
		out[i] = taskdir.File{Path: f.Path, Content: f.Content, Executable: f.Executable}
	}
	return out
}

// packagesOf is what the lock says dpkg installed in the image name of
// digest, or nothing when the lock does not know it (an --allow-image
// digest).
func (e *executor) packagesOf(name, digest string) []images.Package {
	if e.lock == nil {
		return nil
	}
	lock, err := e.lock.Lock()
	if im, ok := lock.Entry(name); err == nil && ok && im.Digest == digest {
		return im.Packages
	}
	return nil
}
