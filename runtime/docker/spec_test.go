package docker

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxd/sandboxd/internal/sandbox/lifecycle"
	"github.com/sandboxd/sandboxd/internal/sandbox/seccomp"
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
		Tmpfs:      []runtime.Tmpfs{{Target: "/tmp", SizeBytes: 256 << 20}},
		ControlDir: "/var/lib/sandboxd/tasks/x/control",
		Resources:  runtime.Resources{MemoryBytes: 512 << 20, CPUMillis: 1500, Pids: 128, NoFile: 1024},
		Stdout:     &bytes.Buffer{},
		Stderr:     &bytes.Buffer{},
	}
	return lifecycle.Config{
		Name: "sandboxd-" + spec.ID, Spec: spec,
		Layout: lifecycle.LayoutOf(spec, "/usr/local/lib/sandboxd/sandboxd-init"),
		Cgroup: "/sandboxd/default/sandboxd-default-0123456789abcdef01234567",
	}
}

// TestContainerConfigGolden pins what the backend is asked for: any change
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
		{"hostconfig.json", mustHostConfig(t, runc)},
		{"hostconfig-runsc.json", mustHostConfig(t, runsc)},
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

// mustHostConfig is the HostConfig of cfg, with its seccomp profile (long,
// and golden-tested in internal/sandbox/seccomp) replaced by its digest, which must
// be the one the runtime's containers are said to get.
func mustHostConfig(t *testing.T, cfg lifecycle.Config) *container.HostConfig {
	t.Helper()
	hc, err := hostConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range hc.SecurityOpt {
		if strings.HasPrefix(o, "seccomp=") {
			sum := sha256.Sum256([]byte(strings.TrimPrefix(o, "seccomp=")))
			digest := "sha256:" + hex.EncodeToString(sum[:])
			if want := seccomp.Digest(cfg.Spec.Runtime); digest != want {
				t.Errorf("the %s profile given has digest %s, want %s", cfg.Spec.Runtime, digest, want)
			}
			hc.SecurityOpt[i] = "seccomp=<profile " + digest + ">"
		}
	}
	return hc
}
