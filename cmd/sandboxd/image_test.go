package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestImageBuildOutIsMadeFirst: `image build --out DIR` makes DIR, and
// refuses before any build when it cannot, not after one of minutes.
func TestImageBuildOutIsMadeFirst(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err := runImageBuild([]string{"--out", filepath.Join(file, "out"), "python"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "--out") || strings.Contains(stderr.String(), "image build: ") {
		t.Fatalf("%v, stderr %q: want a refusal naming --out, and no build started", err, stderr.String())
	}
}

// TestMoveFileAcrossFileSystems: the archive reaches --out on another
// file system whole, and leaves its source.
func TestMoveFileAcrossFileSystems(t *testing.T) {
	other, err := os.MkdirTemp("/dev/shm", "sandboxd-test-")
	if err != nil {
		t.Skip("no /dev/shm to move across:", err)
	}
	defer os.RemoveAll(other)
	src := filepath.Join(t.TempDir(), "a.tar")
	want := bytes.Repeat([]byte("archive "), 100_000)
	if err := os.WriteFile(src, want, 0o600); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(other, "a.tar")
	if err := moveFile(src, dst); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the moved file: %d bytes, %v; want %d", len(got), err, len(want))
	}
	if st, _ := os.Stat(dst); st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", st.Mode().Perm())
	}
	if _, err := os.Stat(src); !os.IsNotExist(err) {
		t.Errorf("the source is still there: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(other, ".a.tar-*")); len(left) > 0 {
		t.Errorf("temporary copies left: %v", left)
	}
}
