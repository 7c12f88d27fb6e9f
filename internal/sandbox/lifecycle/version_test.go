package lifecycle

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestParseVersion(t *testing.T) {
	for out, want := range map[string]string{
		"runc version 1.1.5+ds1\ncommit: 1.1.5\nspec: 1.0.2-dev\n": "1.1.5+ds1",
		"runsc version release-20220510.0\nspec: 1.0.2\n":          "release-20220510.0",
		"runsc version VERSION_MISSING\nspec: 1.2.1\n":             "VERSION_MISSING",
		"garbage": "",
	} {
		if got := parseVersion(out); got != want {
			t.Errorf("parseVersion(%q) = %q, want %q", out, got, want)
		}
	}
}

func TestBinaryVersion(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "fake-runc")
	os.WriteFile(script, []byte("#!/bin/sh\necho 'runc version 9.9.9'\n"), 0o755)
	if got := BinaryVersion(context.Background(), script); got != "9.9.9" {
		t.Errorf("a runtime that knows its version: %q", got)
	}
	// A Go binary that says VERSION_MISSING and was built here, so that Go
	// recorded no module version either: unknown, not "VERSION_MISSING".
	// (A `go install ...@VERSION` binary reports its module version; the
	// conformance suite checks the real runsc.)
	src := filepath.Join(dir, "main.go")
	os.WriteFile(src, []byte("package main\nimport \"fmt\"\nfunc main() { fmt.Println(\"runsc version VERSION_MISSING\") }\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/fakerunsc\ngo 1.26\n"), 0o644)
	bin := filepath.Join(dir, "fake-runsc")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Skipf("cannot build a Go binary here: %v %s", err, out)
	}
	if got := BinaryVersion(context.Background(), bin); got != "" {
		t.Errorf("a Go runtime without any version: %q, want unknown", got)
	}
	if got := BinaryVersion(context.Background(), filepath.Join(dir, "missing")); got != "" {
		t.Errorf("a missing binary: %q", got)
	}
}
