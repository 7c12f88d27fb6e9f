package docker

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"

	"github.com/sandboxd/sandboxd/internal/sandbox/lifecycle"
	"github.com/sandboxd/sandboxd/runtime"
)

// containerConfig is the portable part of a container's configuration. Its
// stdin is open for its init to read the task from; the task's argv and
// environment come that way too.
func containerConfig(cfg lifecycle.Config) *container.Config {
	spec := cfg.Spec
	return &container.Config{
		Image:        spec.Image,
		Cmd:          cfg.Layout.Argv,
		Entrypoint:   []string{},
		WorkingDir:   spec.WorkingDir,
		User:         cfg.Layout.User,
		Hostname:     spec.Hostname,
		Labels:       spec.Labels,
		AttachStdout: true,
		AttachStderr: true,
		AttachStdin:  true,
		OpenStdin:    true,
		StdinOnce:    true,
		// Never a TTY: output must stay bytes exactly as written, with
		// stdout and stderr apart.
		Tty: false,
		// On runc, no networking from the backend at all: runc gives the
		// container a network namespace of its own with only loopback, up,
		// as "none" does, but without the prestart hook through which
		// dockerd re-executes itself (libnetwork-setkey) for every
		// container, which cost more CPU than anything else per task.
		// runsc leaves such a namespace's loopback down and gives the
		// sandbox no interface at all, so there "none" stays, unless
		// Docker has runsc with a loopback of its own (ownLoopback).
		NetworkDisabled: spec.Runtime != runtime.RunscName,
	}
}

// runscNetworkNone is the name the set-up registers runsc under a second
// time, with --network=none: gVisor then makes the sandbox's loopback in
// its own network stack and gives it no other interface.
const runscNetworkNone = "runsc-network-none"

// registeredNetworkNone says whether Docker has runsc registered as
// runscNetworkNone, with the seccomp flag the backend needs of every runsc.
func registeredNetworkNone(runtimes map[string]system.RuntimeWithStatus) bool {
	rt, ok := runtimes[runscNetworkNone]
	return ok && slices.Contains(rt.Args, lifecycle.RunscSeccompFlag) && slices.Contains(rt.Args, "--network=none")
}

// ownLoopback runs a runsc container as runscNetworkNone, with no network
// from the backend: its loopback is gVisor's, as on "none", and dockerd
// sets up no network for it (a sandbox, a namespace, the hook it
// re-executes itself for), which was a quarter of a gVisor task's CPU.
func ownLoopback(cc *container.Config, hc *container.HostConfig) {
	hc.Runtime, cc.NetworkDisabled = runscNetworkNone, true
}

// hostConfig holds the isolation and limits of a container.
func hostConfig(cfg lifecycle.Config) (*container.HostConfig, error) {
	spec, l := cfg.Spec, cfg.Layout
	r := spec.Resources
	profile, err := json.Marshal(l.Seccomp)
	if err != nil {
		return nil, err
	}
	hc := &container.HostConfig{
		// Output travels only through the attach stream; the backend keeps
		// no log copy that could fill its disk.
		LogConfig:      container.LogConfig{Type: "none"},
		NetworkMode:    "none",
		Runtime:        spec.Runtime,
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		CapAdd:         l.Capabilities,
		// no-new-privileges blocks setuid binaries; the seccomp profile is
		// sandboxd's, not the backend's default (Docker 20.10's allows
		// io_uring).
		SecurityOpt: []string{"no-new-privileges:true", "seccomp=" + string(profile)},
		IpcMode:     "private",
		// A cgroup namespace of its own: the program sees its cgroup as
		// "/", not the host's path, which names the instance and the run.
		CgroupnsMode: container.CgroupnsModePrivate,
		Tmpfs:        map[string]string{},
		Resources: container.Resources{
			Memory: r.MemoryBytes,
			// Memory and swap together equal memory: no swap.
			MemorySwap:   r.MemoryBytes,
			NanoCPUs:     r.CPUMillis * 1_000_000,
			PidsLimit:    &l.PidsLimit,
			CgroupParent: cfg.Cgroup,
		},
	}
	for _, rl := range l.Rlimits {
		hc.Ulimits = append(hc.Ulimits, &container.Ulimit{Name: rl.Name, Soft: rl.Limit, Hard: rl.Limit})
	}
	for _, t := range l.Tmpfs {
		// exec said: Docker's default is noexec, which containerd's is
		// not; a compiled language runs what it built in /tmp.
		hc.Tmpfs[t.Target] = fmt.Sprintf("rw,exec,nosuid,nodev,size=%d,mode=1777", t.SizeBytes)
	}
	for _, m := range l.Binds {
		hc.Mounts = append(hc.Mounts, mount.Mount{
			Type:     mount.TypeBind,
			Source:   m.Source,
			Target:   m.Target,
			ReadOnly: m.ReadOnly,
			BindOptions: &mount.BindOptions{
				Propagation:  mount.PropagationRPrivate,
				NonRecursive: true,
			},
		})
	}
	return hc, nil
}

// withEgress puts a container on the egress network at addr, instead of
// none: its one interface is its link to the gateway, and the gateway its
// DNS server. Docker's own DNS server in the container (127.0.0.11) is
// cut off once the container starts (blockEmbeddedDNS).
func withEgress(cc *container.Config, hc *container.HostConfig, netName string, addr, gw netip.Addr) *network.NetworkingConfig {
	cc.NetworkDisabled = false
	hc.NetworkMode = container.NetworkMode(netName)
	hc.DNS = []string{gw.String()}
	return &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
		netName: {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: addr.String()}},
	}}
}
