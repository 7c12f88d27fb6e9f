package taskdir

import (
	"os"
	"path/filepath"
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
	first, err := TakeSnapshot(dir, Snapshot{}, lim)
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := first.Entry("link"); e.Type != "symlink" || e.SHA256 != "" {
		t.Fatalf("the link was followed: %+v", e)
	}
	same, err := TakeSnapshot(dir, first, lim)
	if err != nil {
		t.Fatal(err)
	}
	if same.Digest != first.Digest || !same.UnchangedSince(first, "a.txt") {
		t.Fatalf("an unchanged workspace has a new digest or changed files")
	}
	write("sub/b.txt", "B")
	write("c.txt", "c")
	after, err := TakeSnapshot(dir, same, lim)
	if err != nil {
		t.Fatal(err)
	}
	if after.Digest == same.Digest {
		t.Fatal("a changed workspace kept its digest")
	}
	for p, want := range map[string]bool{"a.txt": true, "sub/b.txt": false, "c.txt": false} {
		if got := after.UnchangedSince(same, p); got != want {
			t.Errorf("UnchangedSince(%s) = %v, want %v", p, got, want)
		}
	}
}
