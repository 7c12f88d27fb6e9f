package lifecycle

import (
	"fmt"
	"maps"
	"os"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// OCIVersion is the newest runtime-spec version whose fields OCISpec
// uses (defaultErrnoRet and errnoRet in seccomp are 1.0.2's). It says so,
// rather than the version of the Go package that wrote it: crun 1.8
// refuses specs that claim 1.2 or later.
const OCIVersion = "1.0.2"

// CPUPeriod is the CFS period; a CPU limit is a quota of it.
const CPUPeriod = 100_000

// OCISpec is the whole OCI runtime spec of the container of c, for the
// backends that hand an OCI runtime a bundle: the root file system at
// "rootfs" beside it, read-only; the cgroup at cgroupsPath; the network
// namespace at netnsPath. Nothing is taken from the image: argv,
// environment, user and folder are all sandboxd's. The namespaces, the
// kernel file systems, the masked and read-only paths and the device rule
// are those containerd and Docker give every container.
func OCISpec(c Config, cgroupsPath, netnsPath string) *specs.Spec {
	spec, l := c.Spec, c.Layout
	r := spec.Resources
	uid, gid, _ := strings.Cut(l.User, ":")
	u, _ := strconv.ParseUint(uid, 10, 32)
	g, _ := strconv.ParseUint(gid, 10, 32)
	var rlimits []specs.POSIXRlimit
	for _, rl := range l.Rlimits {
		rlimits = append(rlimits, specs.POSIXRlimit{Type: "RLIMIT_" + strings.ToUpper(rl.Name), Hard: uint64(rl.Limit), Soft: uint64(rl.Limit)})
	}
	mounts := kernelMounts()
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
	quota, period := r.CPUMillis*CPUPeriod/1000, uint64(CPUPeriod)
	memory, pids := r.MemoryBytes, l.PidsLimit
	s := &specs.Spec{
		Version: OCIVersion,
		Process: &specs.Process{
			User: specs.User{UID: uint32(u), GID: uint32(g)},
			Args: slices.Clone(l.Argv),
			// The init needs no environment; the task's comes with its
			// argv in the launch message.
			Cwd: spec.WorkingDir,
			// Every set but the inheritable and ambient ones: the program
			// the init starts gets none.
			Capabilities: &specs.LinuxCapabilities{
				Bounding: slices.Clone(l.Capabilities), Effective: slices.Clone(l.Capabilities), Permitted: slices.Clone(l.Capabilities),
			},
			Rlimits:         rlimits,
			NoNewPrivileges: true,
		},
		Root:        &specs.Root{Path: "rootfs", Readonly: true},
		Hostname:    spec.Hostname,
		Mounts:      mounts,
		Annotations: maps.Clone(l.Annotations),
		Linux: &specs.Linux{
			Resources: &specs.LinuxResources{
				Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
				// Memory and swap together equal memory: no swap.
				Memory: &specs.LinuxMemory{Limit: &memory, Swap: &memory},
				CPU:    &specs.LinuxCPU{Quota: &quota, Period: &period},
				Pids:   &specs.LinuxPids{Limit: &pids},
			},
			CgroupsPath: cgroupsPath,
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
				// A network namespace of the task's own with only loopback,
				// up (and its link to the egress gateway, when it has one).
				{Type: specs.NetworkNamespace, Path: netnsPath},
				// A cgroup namespace of its own: the program sees its cgroup
				// as "/", not the host's path, which names the instance and
				// the run.
				{Type: specs.CgroupNamespace},
			},
			MaskedPaths:   slices.Clone(maskedPaths()),
			ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
			// sandboxd's seccomp profile, not the OCI runtime's default.
			Seccomp: l.Seccomp,
		},
	}
	return s
}

// kernelMounts are the kernel's file systems every container has, and a
// /dev and /run of its own.
func kernelMounts() []specs.Mount {
	return []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/run", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
	}
}

// maskedPaths hide what tells of the host or reaches its hardware; the
// CPUs' thermal throttle counters where the host has them.
var maskedPaths = sync.OnceValue(func() []string {
	paths := []string{
		"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/sys/devices/virtual/powercap", "/proc/scsi",
	}
	for cpu := range goruntime.NumCPU() {
		p := fmt.Sprintf("/sys/devices/system/cpu/cpu%d/thermal_throttle", cpu)
		if _, err := os.Stat(p); err == nil {
			paths = append(paths, p)
		}
	}
	return paths
})
