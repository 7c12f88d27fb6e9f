package lifecycle

import (
	"bytes"
	"encoding/json"
	goruntime "runtime"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/runtime"
)

func ociTestConfig(rt string) Config {
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
	return Config{Name: "sandboxd-" + spec.ID, Spec: spec, Layout: LayoutOf(spec, "/usr/local/lib/sandboxd/sandboxd-init")}
}

// TestOCISpecGolden pins the whole OCI spec a container gets, for runc
// and for runsc. The host's CPU thermal counters, masked where the host
// has them, are left out: the golden file is the same on every host.
func TestOCISpecGolden(t *testing.T) {
	if goruntime.GOARCH != "amd64" {
		t.Skip("the seccomp profile, part of the spec, depends on the architecture")
	}
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			spec := OCISpec(ociTestConfig(rt), "/sandboxd/default/sandboxd-default-0123/task", "/run/sandboxd/netns/default/sandboxd-default-0123")
			// The seccomp profile is long, and golden-tested where it is
			// made (internal/sandbox/seccomp).
			if spec.Linux.Seccomp == nil || len(spec.Linux.Seccomp.Syscalls) == 0 {
				t.Fatal("the spec has no seccomp profile")
			}
			spec.Linux.Seccomp = nil
			spec.Linux.MaskedPaths = spec.Linux.MaskedPaths[:12]
			got, _ := json.MarshalIndent(spec, "", "  ")
			testutil.Golden(t, "oci-spec-"+rt+".json", append(got, '\n'))
		})
	}
}

// TestOCISpecIsItsOwn gives each spec slices of its own: a backend that
// adds to one container's spec changes no other's.
func TestOCISpecIsItsOwn(t *testing.T) {
	cfg := ociTestConfig("runc")
	a, b := OCISpec(cfg, "/a", ""), OCISpec(cfg, "/b", "")
	a.Linux.MaskedPaths[0], a.Process.Capabilities.Bounding[0], a.Process.Args[0] = "x", "x", "x"
	if b.Linux.MaskedPaths[0] == "x" || b.Process.Capabilities.Bounding[0] == "x" || b.Process.Args[0] == "x" || cfg.Layout.Capabilities[0] == "x" {
		t.Fatal("two specs share a slice")
	}
}
