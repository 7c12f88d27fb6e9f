package seccomp

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxd/sandboxd/runtime"
)

func TestCrunFilters(t *testing.T) {
	profile := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{{Names: []string{"read"}, Action: specs.ActAllow}}}
	other := &specs.LinuxSeccomp{DefaultAction: specs.ActKill}
	annotation := func(rt string, p *specs.LinuxSeccomp, f *CrunPrograms) (string, bool) {
		v, ok := f.Filter(rt, p).Annotations()[crunFilterAnnotation]
		return v, ok
	}
	var f CrunPrograms
	if _, ok := annotation(runtime.CrunName, profile, &f); ok {
		t.Fatal("a program was given before crun compiled one")
	}

	dir := t.TempDir()
	program := make([]byte, 3*8)
	for i := range program {
		program[i] = byte(i)
	}
	if err := os.WriteFile(filepath.Join(dir, "seccomp.bpf"), program, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.Filter(runtime.CrunName, profile).Learn(dir); err != nil {
		t.Fatalf("learn() = %v", err)
	}
	if got, ok := annotation(runtime.CrunName, profile, &f); !ok || got != base64.StdEncoding.EncodeToString(program) {
		t.Errorf("the annotation is %q, %v; want the program crun compiled", got, ok)
	}
	if _, ok := annotation(runtime.CrunName, other, &f); ok {
		t.Error("another profile got the program")
	}
	if _, ok := annotation("runc", profile, &f); ok {
		t.Error("runc got crun's program")
	}

	// What is not a program is not learnt.
	for name, b := range map[string][]byte{"empty": {}, "ragged": make([]byte, 12), "too long": make([]byte, 8*(bpfMaxInstructions+1))} {
		bad := t.TempDir()
		if err := os.WriteFile(filepath.Join(bad, "seccomp.bpf"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := f.Filter(runtime.CrunName, other).Learn(bad); err == nil {
			t.Errorf("%s: learn() took %d bytes", name, len(b))
		}
	}
	if err := f.Filter(runtime.CrunName, other).Learn(t.TempDir()); err == nil {
		t.Error("learn() of a folder without a program gave no error")
	}
	if _, ok := annotation(runtime.CrunName, other, &f); ok {
		t.Error("a bad program was given")
	}
}
