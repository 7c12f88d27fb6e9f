package containerd

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/typeurl/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxd/sandboxd/internal/sandbox/lifecycle"
	"github.com/sandboxd/sandboxd/runtime"
)

func testConfig(rt string) lifecycle.Config {
	spec := runtime.Spec{
		ID: "default-0123", Image: "sha256:abc", Runtime: rt,
		Argv:       []string{"python3", "/code/main.py"},
		WorkingDir: "/workspace", User: "1000:1000", Hostname: "sandbox",
		Mounts:     []runtime.Mount{{Source: "/var/lib/sandboxd/tasks/default/x/workspace", Target: "/workspace"}},
		ControlDir: "/var/lib/sandboxd/tasks/default/x/control",
		Resources:  runtime.Resources{MemoryBytes: 256 << 20, CPUMillis: 500, Pids: 64, NoFile: 1024},
		Stdout:     &bytes.Buffer{}, Stderr: &bytes.Buffer{},
	}
	return lifecycle.Config{Name: "sandboxd-" + spec.ID, Spec: spec, Layout: lifecycle.LayoutOf(spec, "/usr/local/lib/sandboxd/sandboxd-init")}
}

// TestSpecIsTheSharedOne checks that a container's spec on containerd is
// lifecycle.OCISpec's (golden-tested there) with containerd's own
// annotations added, and nothing else changed: the layout's annotations,
// shared by every container, stay as they were.
func TestSpecIsTheSharedOne(t *testing.T) {
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			cfg := testConfig(rt)
			before := len(cfg.Layout.Annotations)
			want := lifecycle.OCISpec(cfg, "/sandboxd/x/task", "/run/netns/x")
			var ctr containers.Container
			opt := client.WithSpec(lifecycle.OCISpec(cfg, "/sandboxd/x/task", "/run/netns/x"), withShimGroup("g"))
			if err := opt(context.Background(), nil, &ctr); err != nil {
				t.Fatal(err)
			}
			v, err := typeurl.UnmarshalAny(ctr.Spec)
			if err != nil {
				t.Fatal(err)
			}
			got := v.(*specs.Spec)
			if got.Annotations[shimGroup] != "g" {
				t.Errorf("annotations %v lack the shim group", got.Annotations)
			}
			delete(got.Annotations, shimGroup)
			if len(got.Annotations) == 0 {
				got.Annotations = nil
			}
			if a, b := mustJSON(t, got), mustJSON(t, want); !reflect.DeepEqual(a, b) {
				t.Errorf("containerd's spec differs from lifecycle.OCISpec's:\n%s\nwant\n%s", a, b)
			}
			if len(cfg.Layout.Annotations) != before {
				t.Errorf("the layout's annotations changed: %v", cfg.Layout.Annotations)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
