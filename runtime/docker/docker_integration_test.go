//go:build integration

package docker

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/runtime/conformance"
)

// connect reaches the local Docker engine, or skips (fails in CI).
func connect(t *testing.T) *Runtime {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rt, err := Connect(ctx, Options{InitPath: testutil.BuildInit(t), CgroupRoot: "/sys/fs/cgroup", CgroupParent: "/sandboxd/conformance"})
	if err != nil {
		testutil.SkipOrFail(t, "no Docker engine: %v (scripts/setup.sh starts one)", err)
	}
	t.Cleanup(func() {
		if err := rt.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return rt
}

func (r *Runtime) leftovers(ctx context.Context, labels map[string]string) ([]string, error) {
	args := filters.NewArgs()
	for k, v := range labels {
		args.Add("label", k+"="+v)
	}
	list, err := r.client.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, c := range list {
		names = append(names, c.Names...)
	}
	return names, nil
}

func TestConformanceRunc(t *testing.T) {
	rt := connect(t)
	conformance.Run(t, conformance.Target{
		Runtime:    rt,
		OCIRuntime: "runc",
		Leftovers:  rt.leftovers,
	})
}

func TestConformanceRunsc(t *testing.T) {
	rt := connect(t)
	conformance.Run(t, conformance.Target{
		Runtime:    rt,
		OCIRuntime: "runsc",
		Leftovers:  rt.leftovers,
	})
}
