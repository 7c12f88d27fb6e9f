package task

import (
	"fmt"
	"log/slog"

	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/runtime"
)

// executor makes the containers of runs and of the pool on the service's
// runtime: their folders and their specs. It holds what runs need of the
// service, and nothing of its admission, registry or pool.
type executor struct {
	rt    runtime.Runtime
	disk  Disk
	uids  *uids
	tasks string // StateDir/tasks/INSTANCE
	cfg   Config
	log   *slog.Logger
}

// newWorkspace makes the folders of the task id.
func (e *executor) newWorkspace(id string, diskBytes int64) (*workspace, error) {
	return createWorkspace(e.disk, e.tasks, id, diskBytes, e.cfg.Bounds, e.uids)
}

// containerSpec is what every task's container has, pooled or made for
// it: its name, labels, user, host name, task folder, /tmp and limits.
func (e *executor) containerSpec(id, image, ociRuntime string, ws *workspace, lim limits.Limits) runtime.Spec {
	return runtime.Spec{
		ID:       e.cfg.Instance + "-" + id,
		Image:    image,
		Runtime:  ociRuntime,
		User:     fmt.Sprintf("%d:%d", ws.uid, ws.uid),
		Hostname: sandboxHostname,
		Labels:   map[string]string{LabelInstance: e.cfg.Instance, LabelRun: id},
		Mounts: []runtime.Mount{
			{Source: ws.path(wsWorkspace), Target: workspaceDir},
			{Source: ws.path(wsInput), Target: inputDir, ReadOnly: true},
			{Source: ws.path(wsCode), Target: images.CodeDir, ReadOnly: true},
		},
		Tmpfs:     []runtime.Tmpfs{{Target: "/tmp", SizeBytes: lim.DiskBytes}},
		Resources: runtime.Resources{MemoryBytes: lim.MemoryBytes, CPUMillis: lim.CPUMillis, Pids: lim.Pids, NoFile: e.cfg.NoFile},
	}
}
