package task

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSnapshotSeesChangesAndNoLinks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.txt", "a")
	write("sub/b.txt", "b")
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	lim := DefaultOutputLimits()
	first, err := takeSnapshot(dir, nil, lim)
	if err != nil {
		t.Fatal(err)
	}
	if e := first.entries["link"]; e.typ != "symlink" || e.sha256 != "" {
		t.Fatalf("the link was followed: %+v", e)
	}
	same, err := takeSnapshot(dir, first.entries, lim)
	if err != nil {
		t.Fatal(err)
	}
	if same.digest != first.digest || !same.unchangedSince(first, "a.txt") {
		t.Fatalf("an unchanged workspace has a new digest or changed files")
	}
	write("sub/b.txt", "B")
	write("c.txt", "c")
	after, err := takeSnapshot(dir, same.entries, lim)
	if err != nil {
		t.Fatal(err)
	}
	if after.digest == same.digest {
		t.Fatal("a changed workspace kept its digest")
	}
	for p, want := range map[string]bool{"a.txt": true, "sub/b.txt": false, "c.txt": false} {
		if got := after.unchangedSince(same, p); got != want {
			t.Errorf("unchangedSince(%s) = %v, want %v", p, got, want)
		}
	}
}

func TestCallOptionsThatAreTheSessions(t *testing.T) {
	if err := checkCallOptions(Options{Env: map[string]string{"A": "1"}, Workdir: "sub"}); err != nil {
		t.Fatalf("env and workdir refused: %v", err)
	}
	for field, o := range map[string]Options{
		"options.runtime": {Runtime: "runc"},
		"options.mounts":  {Mounts: []string{"data"}},
	} {
		if err := checkCallOptions(o); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v", field, err)
		}
	}
}
