package task

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCheckpointDigestSeesEveryChange: a byte changed, a file added or
// renamed changes the digest; a symbolic link is refused, as no
// checkpoint holds one.
func TestCheckpointDigestSeesEveryChange(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("checkpoint.img", "state")
	write("pages.img", "memory")
	digest := func() string {
		t.Helper()
		d, err := digestDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	seen := map[string]string{digest(): "the checkpoint"}
	for _, step := range []struct {
		what   string
		change func() error
	}{
		{"a byte changed", func() error { return os.WriteFile(filepath.Join(dir, "pages.img"), []byte("memorY"), 0o600) }},
		{"a file added", func() error { return os.WriteFile(filepath.Join(dir, "extra.img"), nil, 0o600) }},
		{"a file renamed", func() error { return os.Rename(filepath.Join(dir, "extra.img"), filepath.Join(dir, "other.img")) }},
	} {
		what := step.what
		if err := step.change(); err != nil {
			t.Fatal(err)
		}
		d := digest()
		if before, ok := seen[d]; ok {
			t.Errorf("%s: the digest is %s's", what, before)
		}
		seen[d] = what
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := digestDir(dir); err == nil {
		t.Error("a checkpoint holding a symbolic link was digested")
	}
}
