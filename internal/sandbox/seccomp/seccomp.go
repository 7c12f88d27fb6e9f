// Package seccomp is sandboxd's seccomp profile: the system calls a
// sandboxed program may make. It is the same on every backend, versioned in
// this folder as profile.json, applied by runc and by runsc (inside the
// sandbox, in the form For gives it), and recorded in every bundle by the
// digest of the form applied.
//
// It is containerd's default profile for a container without capabilities,
// less the families in Denied, which a sandboxed program never needs and
// which widen the kernel's attack surface (io_uring was allowed by Docker
// 20.10's default profile). profile.json is generated from that; go test
// -update regenerates it, and the test fails when it is stale. CrunPrograms
// keeps what crun compiled of it, to hand crun back (crun.go).
package seccomp

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxd/sandboxd/runtime"
)

//go:embed profile.json
var profileJSON []byte

// Denied are the system calls the profile denies whatever containerd's
// default allows, by family.
var Denied = map[string][]string{
	"io_uring":         {"io_uring_setup", "io_uring_enter", "io_uring_register"},
	"userfaultfd":      {"userfaultfd"},
	"bpf":              {"bpf"},
	"perf_event_open":  {"perf_event_open"},
	"keys":             {"keyctl", "add_key", "request_key"},
	"namespaces":       {"unshare", "setns", "clone3"},
	"mount":            {"mount", "umount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr", "chroot"},
	"kexec":            {"kexec_load", "kexec_file_load"},
	"modules":          {"init_module", "finit_module", "delete_module"},
	"clocks":           {"clock_settime", "clock_adjtime", "settimeofday", "adjtimex", "stime"},
	"numa":             {"mbind", "set_mempolicy", "set_mempolicy_home_node", "migrate_pages", "move_pages"},
	"host management":  {"reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "syslog", "vhangup"},
	"file handles":     {"name_to_handle_at", "open_by_handle_at"},
	"other processes":  {"pidfd_getfd", "kcmp"},
	"hardware and old": {"iopl", "ioperm", "uselib", "ustat", "sysfs", "_sysctl", "lookup_dcookie", "nfsservctl", "vm86", "vm86old"},
}

// For is the profile as the OCI runtime applies it. gVisor's --oci-seccomp
// answers every ERRNO rule with EPERM whatever its errnoRet, so for runsc a
// rule that asks for another errno becomes an allow and gVisor's kernel
// answers: told EPERM for clone3 instead of ENOSYS, glibc would not fall
// back to clone and no thread could start. Under runc the profile is
// applied as it is. Every caller gets the same profile: none may change it.
func For(ociRuntime string) *specs.LinuxSeccomp { return formFor(ociRuntime).profile }

// Digest names the profile applied under the OCI runtime: "sha256:" and
// the SHA-256 of For(ociRuntime) in JSON.
func Digest(ociRuntime string) string { return formFor(ociRuntime).digest }

const eperm = 1

// form is the profile in the form one OCI runtime applies, and its digest.
type form struct {
	profile *specs.LinuxSeccomp
	digest  string
}

func formFor(ociRuntime string) form {
	if ociRuntime == runtime.RunscName {
		return forms()[1]
	}
	return forms()[0]
}

// forms parses profile.json once into each form, runc's and runsc's: every
// container's spec takes one, and parsing took ~110 us and 28 KiB each.
var forms = sync.OnceValue(func() [2]form { return [2]form{parse(false), parse(true)} })

func parse(runsc bool) form {
	var p specs.LinuxSeccomp
	if err := json.Unmarshal(profileJSON, &p); err != nil {
		// profile.json is tested to parse; a binary built without a
		// parseable one is broken, not misconfigured.
		panic("seccomp: profile.json: " + err.Error())
	}
	if runsc {
		for i, sc := range p.Syscalls {
			if sc.Action == specs.ActErrno && sc.ErrnoRet != nil && *sc.ErrnoRet != eperm {
				p.Syscalls[i].Action, p.Syscalls[i].ErrnoRet = specs.ActAllow, nil
			}
		}
	}
	b, err := json.Marshal(&p)
	if err != nil {
		panic("seccomp: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return form{profile: &p, digest: "sha256:" + hex.EncodeToString(sum[:])}
}
