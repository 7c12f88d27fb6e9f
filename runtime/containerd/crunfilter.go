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

// lookup gives p's key (its content's SHA-256) and its compiled program,
// if known.
func (f *crunFilters) lookup(p *specs.LinuxSeccomp) ([sha256.Size]byte, string, bool, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return [sha256.Size]byte{}, "", false, err
	}
	key := sha256.Sum256(b)
	f.mu.Lock()
	defer f.mu.Unlock()
	program, ok := f.programs[key]
	return key, program, ok, nil
}

// option is the spec option that gives crun (the OCI runtime rt) the
// compiled program of p, when one is known: nothing otherwise, and the
// runtime compiles it.
func (f *crunFilters) option(rt string, p *specs.LinuxSeccomp) oci.SpecOpts {
	none := func(context.Context, oci.Client, *containers.Container, *specs.Spec) error { return nil }
	if rt != runtime.CrunName || p == nil {
		return none
	}
	_, program, ok, err := f.lookup(p)
	if err != nil || !ok {
		return none
	}
	return oci.WithAnnotations(map[string]string{crunFilterAnnotation: program})
}

// learn reads the program crun compiled for p in the state folder dir of a
// container it created, once per profile.
func (f *crunFilters) learn(p *specs.LinuxSeccomp, dir string) error {
	if p == nil {
		return nil
	}
	key, _, known, err := f.lookup(p)
	if err != nil || known {
		return err
	}
	program, err := os.ReadFile(filepath.Join(dir, "seccomp.bpf"))
	if err != nil {
		return err
	}
	if n := len(program); n == 0 || n%8 != 0 || n/8 > bpfMaxInstructions {
		return fmt.Errorf("%s: %d bytes is no seccomp program", filepath.Join(dir, "seccomp.bpf"), n)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.programs == nil {
		f.programs = map[[sha256.Size]byte]string{}
	}
	f.programs[key] = base64.StdEncoding.EncodeToString(program)
	return nil
}
