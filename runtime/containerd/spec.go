package containerd

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxd/sandboxd/internal/sandbox/lifecycle"
)

// cpuPeriod is the CFS period; the quota is a share of it.
const cpuPeriod = 100_000

// specOpts builds the whole OCI spec of a container from cfg alone (no
// image settings are taken: argv, environment, user and folder are all the
// backend's), on top of containerd's default spec, which brings the
// namespaces, masked paths and device rules.
func specOpts(cfg lifecycle.Config, cgroupsPath, netnsPath string) []oci.SpecOpts {
	spec, l := cfg.Spec, cfg.Layout
	r := spec.Resources
	var rlimits []specs.POSIXRlimit
	for _, rl := range l.Rlimits {
		rlimits = append(rlimits, specs.POSIXRlimit{Type: "RLIMIT_" + strings.ToUpper(rl.Name), Hard: uint64(rl.Limit), Soft: uint64(rl.Limit)})
	}
	var mounts []specs.Mount
	for _, m := range l.Binds {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		// "bind", not "rbind": submounts of the source stay out.
		mounts = append(mounts, specs.Mount{Destination: m.Target, Type: "bind", Source: m.Source,
			Options: []string{"bind", mode, "nosuid", "nodev"}})
	}
	for _, t := range l.Tmpfs {
		mounts = append(mounts, specs.Mount{Destination: t.Target, Type: "tmpfs", Source: "tmpfs",
			Options: []string{"nosuid", "nodev", fmt.Sprintf("size=%d", t.SizeBytes), "mode=1777"}})
	}
	return []oci.SpecOpts{
		oci.WithProcessArgs(l.Argv...),
		// The init needs no environment; the task's comes with its argv
		// in the launch message.
		withEnv(nil),
		oci.WithProcessCwd(spec.WorkingDir),
		oci.WithUser(l.User),
		withNoAdditionalGids,
		oci.WithHostname(spec.Hostname),
		oci.WithRootFSReadonly(),
		oci.WithNoNewPrivileges,
		withCapabilities(l.Capabilities),
		// sandboxd's seccomp profile, the same as under Docker.
		withSeccomp(l.Seccomp),
		oci.WithAnnotations(l.Annotations),
		oci.WithMounts(mounts),
		oci.WithMemoryLimit(uint64(r.MemoryBytes)),
		// Memory and swap together equal memory: no swap.
		oci.WithMemorySwap(r.MemoryBytes),
		oci.WithCPUCFS(r.CPUMillis*cpuPeriod/1000, cpuPeriod),
		oci.WithPidsLimit(l.PidsLimit),
		withRlimits(rlimits),
		// A network namespace of the task's own with only loopback, up.
		oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: netnsPath}),
		// A cgroup namespace of its own: the program sees its cgroup as
		// "/", not the host's path, which names the instance and the run.
		oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.CgroupNamespace}),
		oci.WithCgroup(cgroupsPath),
		withOCIVersion,
	}
}

// ociVersion is the newest runtime-spec version whose fields the spec
// uses (defaultErrnoRet and errnoRet in seccomp are 1.0.2's). It says so,
// rather than the version of the Go package that wrote it: crun 1.8
// refuses specs that claim 1.2 or later.
const ociVersion = "1.0.2"

func withOCIVersion(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
	s.Version = ociVersion
	return nil
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

// withCapabilities gives the process caps, and none inheritable or ambient.
func withCapabilities(caps []string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		s.Process.Capabilities = &specs.LinuxCapabilities{
			Bounding: slices.Clone(caps), Effective: slices.Clone(caps), Permitted: slices.Clone(caps),
			Inheritable: []string{}, Ambient: []string{},
		}
		return nil
	}
}

// withSeccomp sets the seccomp profile.
func withSeccomp(p *specs.LinuxSeccomp) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		s.Linux.Seccomp = p
		return nil
	}
}

// withRlimits replaces the default rlimits.
func withRlimits(rlimits []specs.POSIXRlimit) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		s.Process.Rlimits = rlimits
		return nil
	}
}

const (
	// shimGroup is the annotation by which containerd's runc shim serves
	// containers that carry the same value from one shim process.
	shimGroup = "io.containerd.runc.v2.group"
	// instanceLabel is task.LabelInstance: the daemon instance whose
	// container it is. Its containers share shims with no other's.
	instanceLabel = "io.sandboxd.instance"
)

// withShimGroup puts the container in group (shimGroupOf): an instance's
// containers of one OCI runtime share a shim, as a Kubernetes pod's do: a
// shim of its own is one more Go process started and ended per task, beside
// the `shim start` and `shim delete` containerd 1.6 runs for each anyway
// (docs/benchmarks.md).
// The shim is a host process outside every container, so sharing it joins
// no two tasks; under runsc each container is still a sandbox of its own.
func withShimGroup(group string) oci.SpecOpts {
	return oci.WithAnnotations(map[string]string{shimGroup: group})
}
