package lifecycle

import (
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxd/sandboxd/internal/sandbox/launch"
	"github.com/sandboxd/sandboxd/internal/sandbox/seccomp"
	"github.com/sandboxd/sandboxd/runtime"
)

// Layout is what every container has besides its spec's settings, worked
// out once for every backend, which only spells it in its SDK's terms.
type Layout struct {
	// Argv is the container's command: sandboxd's init, waiting on its
	// stdin for the task (see internal/sandbox/launch).
	Argv []string
	// User is the init's, "0:0": root of the container, with no
	// capability but InitCapabilities and no other group. The init starts
	// the program as the spec's user, who can then neither signal, trace
	// nor read it; gVisor, unlike Linux, does not spare a PID namespace's
	// init the signals it has no handler for, SIGKILL included.
	User string
	// Capabilities are the init's (every set but the ambient and
	// inheritable ones); the program has none.
	Capabilities []string
	// Binds are the host folders bound into the container, without their
	// submounts (a writable one must not show through a read-only bind):
	// the init, read-only, the spec's control folder where the runtime
	// can use it (see ControlDir), then the spec's mounts. Where the backend can
	// say so, they are nosuid and nodev.
	Binds []runtime.Mount
	// Tmpfs are the spec's memory-backed folders, mode 1777, nosuid and
	// nodev, and exec on every backend (a compiled program runs there).
	Tmpfs []runtime.Tmpfs
	// PidsLimit is the pids cgroup limit (see PidsLimits).
	PidsLimit int64
	// Rlimits are set on the init, which the program inherits: no core
	// dumps, the spec's open files and, where the runtime enforces the
	// pids limit that way, processes.
	Rlimits []Rlimit
	// Seccomp is sandboxd's own seccomp profile (internal/sandbox/seccomp) in the
	// runtime's form, not the backend's default.
	Seccomp *specs.LinuxSeccomp
	// Annotations go into the OCI spec where the backend passes them:
	// under runsc, one turns on --oci-seccomp, without which gVisor would
	// not apply Seccomp to the program (a backend that passes none must
	// register runsc with that flag).
	Annotations map[string]string
}

// runscSeccomp is the annotation that turns on runsc's --oci-seccomp, one
// of the flags gVisor lets a spec turn on (never off) without
// --allow-flag-override.
const runscSeccomp = "dev.gvisor.flag.oci-seccomp"

// RunscSeccompFlag is the runsc flag a backend that passes no annotations
// must register runsc with.
const RunscSeccompFlag = "--oci-seccomp"

// Rlimit is a resource limit, soft and hard, by its lower-case name
// without RLIMIT_ ("core", "nofile", "nproc").
type Rlimit struct {
	Name  string
	Limit int64
}

// InitCapabilities are what the init needs: to start the program under its
// user with an empty bounding set, to open the working directory it
// flushes at the end (the program's alone), and to signal the program.
// The init keeps only CAP_KILL once the program runs.
var InitCapabilities = []string{"CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_DAC_READ_SEARCH", "CAP_KILL"}

// InitTarget is where the init is bound, read-only, in every container.
const InitTarget = "/.sandboxd/init"

// LayoutOf is the layout of the container of spec, with the init at
// initPath on the backend's host.
func LayoutOf(spec runtime.Spec, initPath string) Layout {
	r := spec.Resources
	pids, nproc := PidsLimits(spec.Runtime, r.Pids)
	l := Layout{
		Argv:         []string{InitTarget, "--wait"},
		User:         "0:0",
		Capabilities: InitCapabilities,
		Binds:        append([]runtime.Mount{{Source: initPath, Target: InitTarget, ReadOnly: true}}, spec.Mounts...),
		Tmpfs:        spec.Tmpfs,
		PidsLimit:    pids,
		Rlimits:      []Rlimit{{"core", 0}, {"nofile", r.NoFile}},
		Seccomp:      seccomp.For(spec.Runtime),
	}
	if spec.Runtime == runtime.RunscName {
		l.Annotations = map[string]string{runscSeccomp: "true"}
	}
	if dir := ControlDir(spec); dir != "" {
		l.Binds = slices.Insert(l.Binds, 1, runtime.Mount{Source: dir, Target: launch.ControlDir, ReadOnly: true})
	}
	// A prepared container's init sets RLIMIT_NPROC at launch, to the
	// task's limit; a hard limit set here could not be raised.
	if nproc > 0 && spec.Argv != nil {
		l.Rlimits = append(l.Rlimits, Rlimit{"nproc", nproc})
	}
	return l
}

// ControlDir is the spec's control folder when its runtime lets the init
// connect to a host socket: gVisor does not without --host-uds, and its
// sessions go through the backend.
func ControlDir(spec runtime.Spec) string {
	if spec.Runtime == runtime.RunscName {
		return ""
	}
	return spec.ControlDir
}

// PidsLimits returns how a backend enforces a limit of pids processes on a
// container of ociRuntime: the pids cgroup limit of the container, and
// the RLIMIT_NPROC of its user (0 for none).
//
// Under runc the cgroup counts the program's processes and threads, and
// the init's: a bomb that filled it left the init no thread to make, and a
// session's init died with its control connection (seen once in CI). So
// under runc too the program is held by RLIMIT_NPROC, which counts its own
// uid only: every container has a uid of its own (hostuid), so the count
// is the container's. The init is root's, which RLIMIT_NPROC does not
// bound, and the cgroup keeps InitThreads for it.
//
// Under gVisor the cgroup counts the sandbox's host threads instead: the
// sentry's, the gofer's, and two to three per guest thread (225 were seen
// for a bomb at 64 pids in a session); a guest that exhausted it would
// crash the sentry (its Go runtime cannot make a thread) rather than see
// EAGAIN. gVisor's own kernel enforces RLIMIT_NPROC per sandbox, so there
// the cgroup leaves gVisor room for its own threads.
//
// Either way the program gets the pids it asked for, and fork past them
// fails with EAGAIN.
func PidsLimits(ociRuntime string, pids int64) (cgroupPids, nproc int64) {
	if ociRuntime == runtime.RunscName {
		return 3*(pids+InitThreads) + 128, pids
	}
	return pids + InitThreads, pids
}

// InitThreads is the room the pids limit leaves for the init: its Go
// runtime was seen with 6 to 9 threads while the program forked.
const InitThreads = 12
