//go:build integration

package containerd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/snapshots"

	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/runtime/conformance"
	"github.com/sandboxd/sandboxd/task"
)

// connect reaches the set-up's standalone containerd, or skips (fails in
// CI).
func connect(t *testing.T) *Runtime {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rt, err := Connect(ctx, Options{
		Address: "/run/containerd/containerd.sock", Namespace: "sandboxd", InitPath: testutil.BuildInit(t), NetnsDir: t.TempDir(),
		RunscPath: "/usr/local/lib/sandboxd/runsc", RunscRoot: "/run/containerd/runsc",
		CgroupRoot: "/sys/fs/cgroup", CgroupParent: "/sandboxd/conformance-containerd",
	})
	if err != nil {
		testutil.SkipOrFail(t, "no containerd: %v (scripts/setup.sh starts one)", err)
	}
	t.Cleanup(func() {
		if err := rt.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return rt
}

func (r *Runtime) leftovers(ctx context.Context, labels map[string]string) ([]string, error) {
	var filters []string
	for k, v := range labels {
		filters = append(filters, fmt.Sprintf("labels.%q==%q", k, v))
	}
	list, err := r.engine.client.Containers(r.engine.ns(ctx), strings.Join(filters, ","))
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, c := range list {
		ids = append(ids, c.ID())
	}
	// containerd can forget a shim whose container it deleted: the
	// instance's shims must be gone too.
	if instance, ok := labels[task.LabelInstance]; ok {
		shims, err := shimsOf("sandboxd-" + instance + "-")
		if err != nil {
			return nil, err
		}
		ids = append(ids, shims...)
		// A container create cut short can leave its snapshot alone.
		err = r.engine.client.(*client.Client).SnapshotService(snapshotter).Walk(r.engine.ns(ctx), func(_ context.Context, info snapshots.Info) error {
			if strings.HasPrefix(info.Name, "sandboxd-"+instance+"-") {
				ids = append(ids, "snapshot "+info.Name)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// shimsOf lists the running shims whose container ID starts with prefix,
// as "shim PID for ID".
func shimsOf(prefix string) ([]string, error) {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var shims []string
	for _, p := range procs {
		cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue // not a process, or gone
		}
		args := strings.Split(string(cmdline), "\x00")
		if !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for i, a := range args[:len(args)-1] {
			if a == "-id" && strings.HasPrefix(args[i+1], prefix) {
				shims = append(shims, fmt.Sprintf("shim %s for %s", p.Name(), args[i+1]))
			}
		}
	}
	return shims, nil
}

func TestConformanceRunc(t *testing.T) {
	rt := connect(t)
	conformance.Run(t, conformance.Target{Runtime: rt, OCIRuntime: "runc", Leftovers: rt.leftovers})
}

func TestConformanceRunsc(t *testing.T) {
	rt := connect(t)
	conformance.Run(t, conformance.Target{Runtime: rt, OCIRuntime: "runsc", Leftovers: rt.leftovers})
}
