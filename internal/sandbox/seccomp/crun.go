package seccomp

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxd/sandboxd/runtime"
)

// crun compiles the spec's seccomp profile with libseccomp for every
// container it creates: a third of its CPU per task (14 ms here). Debian's
// crun keeps no cache of the result (that needs libgcrypt), but it leaves
// the compiled program in the container's state folder, and takes a
// compiled program in the run.oci.seccomp_bpf_data annotation instead of
// compiling the profile. So the first crun container's program is read
// back and given to every later one whose profile is the same: the very
// filter crun made, from the same crun on the same kernel.

const (
	// crunFilterAnnotation carries a compiled seccomp program, base64.
	crunFilterAnnotation = "run.oci.seccomp_bpf_data"
	// bpfMaxInstructions is the kernel's BPF_MAXINSNS; each is 8 bytes.
	bpfMaxInstructions = 4096
)

// CrunPrograms remembers the programs crun compiled, by profile.
type CrunPrograms struct {
	mu       sync.Mutex
	programs map[[sha256.Size]byte]string // base64
}

// CrunFilter is what is known of one container's profile: its key (the
// SHA-256 of its JSON, computed once per container) and, once crun has
// compiled it, the program.
type CrunFilter struct {
	f       *CrunPrograms
	key     [sha256.Size]byte
	program string // base64; empty until learnt
}

// Filter looks the profile p of a container of the OCI runtime rt up; nil
// for a runtime other than crun, or no profile.
func (f *CrunPrograms) Filter(rt string, p *specs.LinuxSeccomp) *CrunFilter {
	if rt != runtime.CrunName || p == nil {
		return nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil
	}
	cf := &CrunFilter{f: f, key: sha256.Sum256(b)}
	f.mu.Lock()
	defer f.mu.Unlock()
	cf.program = f.programs[cf.key]
	return cf
}

// Annotations are the spec's annotations that give crun the compiled
// program, when one is known: none otherwise, and crun compiles it.
func (cf *CrunFilter) Annotations() map[string]string {
	if cf == nil || cf.program == "" {
		return nil
	}
	return map[string]string{crunFilterAnnotation: cf.program}
}

// Learn reads, when not yet known, the program crun compiled in the state
// folder dir of the container it created.
func (cf *CrunFilter) Learn(dir string) error {
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
