package runtime

import (
	"bytes"
	"testing"

	"github.com/containerd/errdefs"
)

func TestValidateRefusesWeakSpecs(t *testing.T) {
	good := func() Spec {
		return Spec{ID: "x", Image: "sha256:x", Argv: []string{"true"}, WorkingDir: "/", User: "1000:1000",
			Resources: Resources{MemoryBytes: 1 << 20, CPUMillis: 100, Pids: 8, NoFile: 64},
			Stdout:    &bytes.Buffer{}, Stderr: &bytes.Buffer{}}
	}
	if err := good().Validate(false); err != nil {
		t.Fatalf("Validate(good spec) = %v", err)
	}
	prepared := good()
	prepared.Argv, prepared.Stdout, prepared.Stderr = nil, nil, nil
	if err := prepared.Validate(true); err != nil {
		t.Fatalf("Validate(prepared spec) = %v", err)
	}
	tests := []struct {
		name   string
		mutate func(*Spec)
	}{
		{"root user", func(s *Spec) { s.User = "0:1000" }},
		{"root group", func(s *Spec) { s.User = "1000:0" }},
		{"named user", func(s *Spec) { s.User = "sandbox" }},
		{"no user", func(s *Spec) { s.User = "" }},
		{"no memory limit", func(s *Spec) { s.Resources.MemoryBytes = 0 }},
		{"no pids limit", func(s *Spec) { s.Resources.Pids = 0 }},
		{"no argv", func(s *Spec) { s.Argv = nil }},
		{"no stdout", func(s *Spec) { s.Stdout = nil }},
		{"no image", func(s *Spec) { s.Image = "" }},
		{"no working directory", func(s *Spec) { s.WorkingDir = "" }},
		{"relative working directory", func(s *Spec) { s.WorkingDir = "workspace" }},
		{"argv not UTF-8", func(s *Spec) { s.Argv = []string{"echo", "\xff"} }},
		{"NUL in argv", func(s *Spec) { s.Argv = []string{"echo", "a\x00b"} }},
		{"env not KEY=VALUE", func(s *Spec) { s.Env = []string{"PATH"} }},
		{"pre-started interpreter without a command", func(s *Spec) { s.Prestart = &Prestart{Language: "python"} }},
		{"a path to pre-load", func(s *Spec) {
			s.Prestart = &Prestart{Language: "python", Interpreter: "python3", Modules: []string{"../evil"}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := good()
			tt.mutate(&s)
			if err := s.Validate(false); !errdefs.IsInvalidArgument(err) {
				t.Fatalf("Validate() = %v, want invalid argument", err)
			}
		})
	}
}
