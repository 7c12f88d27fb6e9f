package containerd

import (
	"context"
	"fmt"

	"github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxd/sandboxd/runtime"
)

// cpuPeriod is the CFS period; the quota is a share of it.
const cpuPeriod = 100_000

// specOpts builds the whole OCI spec of a container from spec alone (no
// image settings are taken: argv, environment, user and folder are all the
// engine's), on top of containerd's default spec, which brings the
// namespaces, masked paths and device rules. A prepared container (no
// argv) runs its init waiting for the task.
func specOpts(spec runtime.Spec, initPath, cgroupsPath, netnsPath string) []oci.SpecOpts {
	r := spec.Resources
	uid, gid := spec.IDs()
	cgroupPids, nproc := runtime.PidsLimits(spec.Runtime, r.Pids)
	rlimits := []specs.POSIXRlimit{
		{Type: "RLIMIT_CORE", Hard: 0, Soft: 0},
		{Type: "RLIMIT_NOFILE", Hard: uint64(r.NoFile), Soft: uint64(r.NoFile)},
	}
	// A prepared container's init sets RLIMIT_NPROC at launch, to the
	// task's limit; a hard limit set here could not be raised.
	if nproc > 0 && spec.Argv != nil {
		rlimits = append(rlimits, specs.POSIXRlimit{Type: "RLIMIT_NPROC", Hard: uint64(nproc), Soft: uint64(nproc)})
	}
	mounts := []specs.Mount{{
		// sandboxd's init is PID 1: it reaps orphans and gives the program
		// the signal semantics it would have outside a container.
		Destination: runtime.InitTarget, Type: "bind", Source: initPath,
		Options: []string{"bind", "ro", "nosuid", "nodev"},
	}}
	for _, m := range spec.Mounts {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		// "bind", not "rbind": submounts of the source stay out, so a
		// writable one cannot show through a read-only mount.
		mounts = append(mounts, specs.Mount{Destination: m.Target, Type: "bind", Source: m.Source,
			Options: []string{"bind", mode, "nosuid", "nodev"}})
	}
	for _, t := range spec.Tmpfs {
		mounts = append(mounts, specs.Mount{Destination: t.Target, Type: "tmpfs", Source: "tmpfs",
			Options: []string{"nosuid", "nodev", fmt.Sprintf("size=%d", t.SizeBytes), "mode=1777"}})
	}
	return []oci.SpecOpts{
		oci.WithProcessArgs(runtime.InitArgv()...),
		// The init needs no environment; the task's comes with its argv
		// in the launch message.
		withEnv(nil),
		oci.WithProcessCwd(spec.WorkingDir),
		oci.WithUIDGID(uid, gid),
		withNoAdditionalGids,
		oci.WithHostname(spec.Hostname),
		oci.WithRootFSReadonly(),
		oci.WithNoNewPrivileges,
		withNoCapabilities,
		// The runtime's default seccomp profile, as Docker applies it.
		seccomp.WithDefaultProfile(),
		oci.WithMounts(mounts),
		oci.WithMemoryLimit(uint64(r.MemoryBytes)),
		// Memory and swap together equal memory: no swap.
		oci.WithMemorySwap(r.MemoryBytes),
		oci.WithCPUCFS(r.CPUMillis*cpuPeriod/1000, cpuPeriod),
		oci.WithPidsLimit(cgroupPids),
		withRlimits(rlimits),
		// A network namespace of the task's own with only loopback, up.
		oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: netnsPath}),
		oci.WithCgroup(cgroupsPath),
	}
}

// withEnv replaces the environment (oci.WithEnv merges into it).
func withEnv(env []string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		s.Process.Env = append([]string(nil), env...)
		return nil
	}
}

func withNoAdditionalGids(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
	s.Process.User.AdditionalGids = nil
	return nil
}

// withNoCapabilities drops every capability from every set.
func withNoCapabilities(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
	s.Process.Capabilities = &specs.LinuxCapabilities{
		Bounding: []string{}, Effective: []string{}, Permitted: []string{}, Inheritable: []string{}, Ambient: []string{},
	}
	return nil
}

// withRlimits replaces the default rlimits.
func withRlimits(rlimits []specs.POSIXRlimit) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		s.Process.Rlimits = rlimits
		return nil
	}
}
