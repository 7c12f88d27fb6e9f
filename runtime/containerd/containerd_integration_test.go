//go:build integration

package containerd

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runtime/conformance"
)

// connect reaches the set-up's standalone containerd, or skips (fails in
// CI).
func connect(t *testing.T) *Runtime {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rt, err := Connect(ctx, "/run/containerd/containerd.sock", "sandboxd", conformance.BuildInit(t), t.TempDir(),
		"/sys/fs/cgroup", "/sandboxd/conformance-containerd", WithRunsc("/usr/local/lib/sandboxd/runsc", "/run/containerd/runsc"))
	if err != nil {
		conformance.SkipOrFail(t, "no containerd: %v (scripts/setup.sh starts one)", err)
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
	list, err := r.client.Containers(r.ns(ctx), strings.Join(filters, ","))
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, c := range list {
		ids = append(ids, c.ID())
	}
	return ids, nil
}

func TestConformanceRunc(t *testing.T) {
	rt := connect(t)
	conformance.Run(t, conformance.Target{Runtime: rt, OCIRuntime: "runc", Leftovers: rt.leftovers})
}

func TestConformanceRunsc(t *testing.T) {
	rt := connect(t)
	conformance.Run(t, conformance.Target{Runtime: rt, OCIRuntime: "runsc", Leftovers: rt.leftovers})
}
