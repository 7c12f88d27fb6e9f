package task

import (
	"errors"
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
	rt   runtime.Runtime
	disk Disk
	uids *uids
	// egress links allow-listed containers to the gateway; nil without.
	egress Egress
	tasks  string // StateDir/tasks/INSTANCE
	cfg    Config
	log    *slog.Logger
}

// newWorkspace makes the folders of the task id, and allocates its
// address on the egress gateway's subnet when it has egress.
func (e *executor) newWorkspace(id string, diskBytes int64, egress bool) (*workspace, error) {
	ws, err := createWorkspace(e.disk, e.tasks, id, diskBytes, e.cfg.Bounds, e.uids)
	if err != nil || !egress {
		return ws, err
	}
	if e.egress == nil {
		return nil, errors.Join(errors.New("no egress gateway for an allow-listed task"), ws.remove())
	}
	if ws.egress, err = e.egress.Allocate(); err != nil {
		return nil, errors.Join(err, ws.remove())
	}
	ws.freeEgress = e.egress.Free
	return ws, nil
}

// containerSpec is what every task's container has, pooled or made for
// it: its name, labels, user, host name, task folder, /tmp, limits, and
// its link to the egress gateway with the gateway as DNS server.
func (e *executor) containerSpec(id, image, ociRuntime string, ws *workspace, lim limits.Limits) runtime.Spec {
	spec := runtime.Spec{
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
		Tmpfs:      []runtime.Tmpfs{{Target: "/tmp", SizeBytes: lim.DiskBytes}},
		ControlDir: ws.path(wsControl),
		Resources:  e.cfg.resources(lim),
		Egress:     ws.egress,
	}
	if ws.egress.IsValid() {
		spec.Mounts = append(spec.Mounts, runtime.Mount{Source: e.egress.ResolvConf(), Target: "/etc/resolv.conf", ReadOnly: true})
	}
	return spec
}
