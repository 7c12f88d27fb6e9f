package containerd

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxd/sandboxd/runtime"
)

// crun compiles the spec's seccomp profile with libseccomp for every
// container it creates: a third of its CPU per task. Debian's crun keeps no
// cache of the result (that needs libgcrypt), but it leaves the compiled
// program in the container's state folder, and takes a compiled program in
// the run.oci.seccomp_bpf_data annotation instead of compiling the profile.
// So the first crun container's program is read back and given to every
// later one whose profile is the same: the very filter crun made, from the
// same crun on the same kernel.

const (
	// crunFilterAnnotation carries a compiled seccomp program, base64.
	crunFilterAnnotation = "run.oci.seccomp_bpf_data"
	// shimRuntimeRoot is where containerd's runc shim keeps its OCI
	// runtime's state by default, a folder per namespace, then container.
	shimRuntimeRoot = "/run/containerd/runc"
	// bpfMaxInstructions is the kernel's BPF_MAXINSNS; each is 8 bytes.
	bpfMaxInstructions = 4096
)

// crunFilters remembers compiled programs by profile.
type crunFilters struct {
	mu       sync.Mutex
	programs map[[sha256.Size]byte]string // base64
}

// crunFilter is what is known of one container's profile: its key (the
// SHA-256 of its JSON, computed once per container) and, once crun has
// compiled it, the program.
type crunFilter struct {
	f       *crunFilters
	key     [sha256.Size]byte
	program string // base64; empty until learnt
}

// filter looks the profile p of a container of the OCI runtime rt up; nil
// for a runtime other than crun, or no profile.
func (f *crunFilters) filter(rt string, p *specs.LinuxSeccomp) *crunFilter {
	if rt != runtime.CrunName || p == nil {
		return nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil
	}
	cf := &crunFilter{f: f, key: sha256.Sum256(b)}
	f.mu.Lock()
	defer f.mu.Unlock()
	cf.program = f.programs[cf.key]
	return cf
}

// option is the spec option that gives crun the compiled program, when
// one is known: nothing otherwise, and crun compiles it.
func (cf *crunFilter) option() oci.SpecOpts {
	if cf == nil || cf.program == "" {
		return func(context.Context, oci.Client, *containers.Container, *specs.Spec) error { return nil }
	}
	return oci.WithAnnotations(map[string]string{crunFilterAnnotation: cf.program})
}

// learn reads, when not yet known, the program crun compiled in the state
// folder dir of the container it created.
func (cf *crunFilter) learn(dir string) error {
	if cf == nil || cf.program != "" {
		return nil
	}
	path := filepath.Join(dir, "seccomp.bpf")
	program, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if n := len(program); n == 0 || n%8 != 0 || n/8 > bpfMaxInstructions {
		return fmt.Errorf("%s: %d bytes is no seccomp program", path, n)
	}
	cf.f.mu.Lock()
	defer cf.f.mu.Unlock()
	if cf.f.programs == nil {
		cf.f.programs = map[[sha256.Size]byte]string{}
	}
	cf.f.programs[cf.key] = base64.StdEncoding.EncodeToString(program)
	return nil
}
