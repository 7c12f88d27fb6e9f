package seccomp

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	goruntime "runtime"
	"slices"
	"testing"

	ctrdseccomp "github.com/containerd/containerd/v2/contrib/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/runtime"
)

// generate derives the profile: containerd's default for a container
// without capabilities, without the denied system calls.
func generate(t *testing.T) []byte {
	t.Helper()
	sp := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}}
	p := ctrdseccomp.DefaultProfile(sp)
	var denied []string
	for _, names := range Denied {
		denied = append(denied, names...)
	}
	var kept []specs.LinuxSyscall
	for _, sc := range p.Syscalls {
		if sc.Action == specs.ActAllow {
			sc.Names = slices.DeleteFunc(slices.Clone(sc.Names), func(n string) bool { return slices.Contains(denied, n) })
			if len(sc.Names) == 0 {
				continue
			}
		}
		kept = append(kept, sc)
	}
	p.Syscalls = kept
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// TestProfileIsGeneratedAndCurrent regenerates profile.json with -update
// and otherwise fails when it no longer matches its source.
func TestProfileIsGeneratedAndCurrent(t *testing.T) {
	if goruntime.GOARCH != "amd64" {
		t.Skip("profile.json is generated for amd64")
	}
	testutil.GoldenAt(t, "profile.json", generate(t))
}

// TestDeniedAreNotAllowed checks every denied system call against the
// committed profile: no rule allows it, whatever its arguments, and the
// default action refuses it.
func TestDeniedAreNotAllowed(t *testing.T) {
	p := For("runc")
	if p.DefaultAction != specs.ActErrno {
		t.Fatalf("default action %s, want ERRNO", p.DefaultAction)
	}
	for family, names := range Denied {
		for _, name := range names {
			for _, sc := range p.Syscalls {
				if sc.Action == specs.ActAllow && slices.Contains(sc.Names, name) {
					t.Errorf("%s (%s) is allowed by a rule of the profile", name, family)
				}
			}
		}
	}
	// clone stays allowed for threads and processes, only without the
	// flags that make namespaces.
	for _, sc := range p.Syscalls {
		if sc.Action == specs.ActAllow && slices.Contains(sc.Names, "clone") && len(sc.Args) == 0 {
			t.Errorf("clone is allowed whatever its flags")
		}
	}
}

// TestRunscGetsNoErrnoItCannotAnswer checks the gVisor form: every ERRNO
// rule is one gVisor answers as written (EPERM), clone3 is left to
// gVisor's kernel, and the two forms have their own digests.
func TestRunscGetsNoErrnoItCannotAnswer(t *testing.T) {
	runc, runsc := For("runc"), For(runtime.RunscName)
	if len(runc.Syscalls) != len(runsc.Syscalls) {
		t.Fatalf("%d rules for runc, %d for runsc", len(runc.Syscalls), len(runsc.Syscalls))
	}
	changed := 0
	for i, sc := range runsc.Syscalls {
		if sc.Action == specs.ActErrno && sc.ErrnoRet != nil && *sc.ErrnoRet != eperm {
			t.Errorf("runsc rule %v asks for errno %d, which gVisor answers as EPERM", sc.Names, *sc.ErrnoRet)
		}
		if sc.Action != runc.Syscalls[i].Action {
			changed++
			if !slices.Equal(sc.Names, []string{"clone3"}) {
				t.Errorf("runsc rule %v differs from runc's", sc.Names)
			}
		}
	}
	if changed != 1 {
		t.Errorf("%d rules differ between runc and runsc, want clone3's", changed)
	}
	dc, ds := Digest("runc"), Digest(runtime.RunscName)
	if len(dc) != len("sha256:")+64 || dc == ds {
		t.Errorf("digests %q (runc) and %q (runsc): want two SHA-256 digests", dc, ds)
	}
	// A bundle's digest names the profile the spec was given.
	for rt, d := range map[string]string{"runc": dc, runtime.CrunName: dc, runtime.RunscName: ds} {
		b, err := json.Marshal(For(rt))
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(b); d != "sha256:"+hex.EncodeToString(sum[:]) {
			t.Errorf("Digest(%q) = %s, not the digest of For(%[1]q)", rt, d)
		}
	}
}
