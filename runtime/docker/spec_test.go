package docker

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/sandboxd/sandboxd/internal/lifecycle"
	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/runtime"
)

func testConfig(ociRuntime string) lifecycle.Config {
	spec := runtime.Spec{
		ID:         "default-0123456789abcdef01234567",
		Image:      "sha256:710e1c5bc7ebf2d4f7f8faf722305beb8afb4538775857fe360a37e7dbdd8088",
		Runtime:    ociRuntime,
		Argv:       []string{"python3", "/code/main.py"},
		Env:        []string{"HOME=/tmp", "LC_ALL=C.UTF-8", "PATH=/usr/local/bin:/usr/bin:/bin"},
		WorkingDir: "/workspace",
		User:       "1000:1000",
		Hostname:   "sandbox",
		Labels:     map[string]string{"io.sandboxd.instance": "default", "io.sandboxd.run": "0123456789abcdef01234567"},
		Mounts: []runtime.Mount{
			{Source: "/var/lib/sandboxd/tasks/x/workspace", Target: "/workspace"},
			{Source: "/var/lib/sandboxd/tasks/x/input", Target: "/input", ReadOnly: true},
			{Source: "/var/lib/sandboxd/tasks/x/code", Target: "/code", ReadOnly: true},
			{Source: "/srv/datasets", Target: "/mnt/datasets", ReadOnly: true},
		},
		Tmpfs:     []runtime.Tmpfs{{Target: "/tmp", SizeBytes: 256 << 20}},
		Resources: runtime.Resources{MemoryBytes: 512 << 20, CPUMillis: 1500, Pids: 128, NoFile: 1024},
		Stdout:    &bytes.Buffer{},
		Stderr:    &bytes.Buffer{},
	}
	return lifecycle.Config{
		Name: "sandboxd-" + spec.ID, Spec: spec,
		Layout: lifecycle.LayoutOf(spec, "/usr/local/lib/sandboxd/sandboxd-init"),
		Cgroup: "/sandboxd/default/sandboxd-default-0123456789abcdef01234567",
	}
}

// TestContainerConfigGolden pins what the engine is asked for: any change
// to isolation or limits shows up as a diff of testdata/.
func TestContainerConfigGolden(t *testing.T) {
	runc, runsc := testConfig("runc"), testConfig("runsc")
	tests := []struct {
		name string
		got  any
	}{
		// The task's argv, environment and stdin come in its launch
		// message, not in the container's configuration.
		{"config.json", containerConfig(runc)},
		{"config-runsc.json", containerConfig(runsc)},
		{"hostconfig.json", hostConfig(runc)},
		{"hostconfig-runsc.json", hostConfig(runsc)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.MarshalIndent(tt.got, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			testutil.Golden(t, tt.name, append(got, '\n'))
		})
	}
}
