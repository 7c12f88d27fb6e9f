package docker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

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
	loopCC, loopHC := containerConfig(runsc), mustHostConfig(t, runsc)
	ownLoopback(loopCC, loopHC)
	tests := []struct {
		name string
		got  any
	}{
		// The task's argv, environment and stdin come in its launch
		// message, not in the container's configuration.
		{"config.json", containerConfig(runc)},
		{"config-runsc.json", containerConfig(runsc)},
		{"config-runsc-network-none.json", loopCC},
		{"hostconfig.json", mustHostConfig(t, runc)},
		{"hostconfig-runsc.json", mustHostConfig(t, runsc)},
		{"hostconfig-runsc-network-none.json", loopHC},
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

func TestRegisteredNetworkNone(t *testing.T) {
	rt := func(args ...string) system.RuntimeWithStatus {
		return system.RuntimeWithStatus{Runtime: system.Runtime{Path: "/usr/local/lib/sandboxd/runsc", Args: args}}
	}
	for _, tt := range []struct {
		name     string
		runtimes map[string]system.RuntimeWithStatus
		want     bool
	}{
		{"registered", map[string]system.RuntimeWithStatus{runscNetworkNone: rt("--oci-seccomp", "--network=none")}, true},
		{"not registered", map[string]system.RuntimeWithStatus{"runsc": rt("--oci-seccomp")}, false},
		// Without the flag the sandbox would scrape a loopback Docker
		// never brought up: no loopback at all.
		{"without --network=none", map[string]system.RuntimeWithStatus{runscNetworkNone: rt("--oci-seccomp")}, false},
		{"without --oci-seccomp", map[string]system.RuntimeWithStatus{runscNetworkNone: rt("--network=none")}, false},
	} {
		if got := registeredNetworkNone(tt.runtimes); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// creates is a Client that keeps what each container was created with.
type creates struct {
	Client
	cc []*container.Config
	hc []*container.HostConfig
}

func (c *creates) ContainerCreate(_ context.Context, cc *container.Config, hc *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, _ string) (container.CreateResponse, error) {
	c.cc, c.hc = append(c.cc, cc), append(c.hc, hc)
	return container.CreateResponse{ID: "c"}, nil
}

// TestRunscWithoutNetworkOwnsItsLoopback: runsc containers without egress
// run as runscNetworkNone with no network from Docker where it is
// registered, and on Docker's "none" where it is not; runc is unchanged.
func TestRunscWithoutNetworkOwnsItsLoopback(t *testing.T) {
	for _, tt := range []struct {
		runtime     string
		registered  bool
		wantRuntime string
		wantNoNet   bool
	}{
		{"runsc", true, runscNetworkNone, true},
		{"runsc", false, "runsc", false},
		{"runc", true, "runc", true},
	} {
		c := &creates{}
		e := &port{client: c, runscNetworkNone: tt.registered}
		if _, err := e.Create(context.Background(), testConfig(tt.runtime)); err != nil {
			t.Fatal(err)
		}
		if got := c.hc[0].Runtime; got != tt.wantRuntime {
			t.Errorf("%s, registered %v: runtime %q, want %q", tt.runtime, tt.registered, got, tt.wantRuntime)
		}
		if got := c.cc[0].NetworkDisabled; got != tt.wantNoNet {
			t.Errorf("%s, registered %v: NetworkDisabled %v, want %v", tt.runtime, tt.registered, got, tt.wantNoNet)
		}
		if got := c.hc[0].NetworkMode; got != "none" {
			t.Errorf("%s, registered %v: network mode %q, want none", tt.runtime, tt.registered, got)
		}
	}
}

// TestCgroupDriverProblem: only the cgroupfs driver leaves a parent cgroup
// that outlives its container; the reason for any other names the fix.
func TestCgroupDriverProblem(t *testing.T) {
	if err := cgroupDriverProblem("cgroupfs"); err != nil {
		t.Errorf("cgroupfs: %v", err)
	}
	err := cgroupDriverProblem("systemd")
	if err == nil || !strings.Contains(err.Error(), `"systemd"`) || !strings.Contains(err.Error(), "native.cgroupdriver=cgroupfs") {
		t.Errorf("systemd: %v, want a reason naming the driver and the fix", err)
	}
}
