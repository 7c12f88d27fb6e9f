package containerd

import (
	"bytes"
	"context"
	"encoding/json"
	goruntime "runtime"
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"

	"github.com/sandboxd/sandboxd/internal/sandbox/lifecycle"
	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/runtime"
)

func testConfig(rt string) lifecycle.Config {
	spec := runtime.Spec{
		ID: "default-0123", Image: "sha256:abc", Runtime: rt,
		Argv:       []string{"python3", "/code/main.py"},
		Env:        []string{"HOME=/tmp", "PATH=/usr/local/bin:/usr/bin:/bin"},
		WorkingDir: "/workspace", User: "1000:1000", Hostname: "sandbox",
		Mounts: []runtime.Mount{
			{Source: "/var/lib/sandboxd/tasks/default/x/workspace", Target: "/workspace"},
			{Source: "/var/lib/sandboxd/tasks/default/x/input", Target: "/input", ReadOnly: true},
		},
		Tmpfs:      []runtime.Tmpfs{{Target: "/tmp", SizeBytes: 64 << 20}},
		ControlDir: "/var/lib/sandboxd/tasks/default/x/control",
		Resources:  runtime.Resources{MemoryBytes: 256 << 20, CPUMillis: 500, Pids: 64, NoFile: 1024},
		Stdout:     &bytes.Buffer{}, Stderr: &bytes.Buffer{},
	}
	return lifecycle.Config{Name: "sandboxd-" + spec.ID, Spec: spec, Layout: lifecycle.LayoutOf(spec, "/usr/local/lib/sandboxd/sandboxd-init")}
}

// TestSpecGolden pins the whole OCI spec a container gets, on top of
// containerd's defaults, for runc and for runsc.
func TestSpecGolden(t *testing.T) {
	if goruntime.GOARCH != "amd64" {
		t.Skip("the default seccomp profile, part of the golden spec, depends on the architecture")
	}
	for name, cfg := range map[string]lifecycle.Config{"runc": testConfig("runc"), "runsc": testConfig("runsc")} {
		t.Run(name, func(t *testing.T) {
			ctx := namespaces.WithNamespace(context.Background(), "sandboxd")
			spec, err := oci.GenerateSpec(ctx, nil, &containers.Container{ID: "sandboxd-default-0123"},
				specOpts(cfg, "/sandboxd/default/sandboxd-default-0123/task", "/run/sandboxd/netns/default/sandboxd-default-0123")...)
			if err != nil {
				t.Fatal(err)
			}
			// The seccomp profile is long, and golden-tested where it is
			// made (internal/sandbox/seccomp).
			if spec.Linux.Seccomp == nil || len(spec.Linux.Seccomp.Syscalls) == 0 {
				t.Fatal("the spec has no seccomp profile")
			}
			spec.Linux.Seccomp = nil
			got, _ := json.MarshalIndent(spec, "", "  ")
			testutil.Golden(t, "spec-"+name+".json", append(got, '\n'))
		})
	}
}
