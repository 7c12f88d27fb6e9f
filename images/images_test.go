package images

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCatalog(t *testing.T) {
	c := Default()
	py, ok := c.Language("python")
	if !ok || py.Image != "sandboxd/python" || py.Command[len(py.Command)-1] != CodeDir+"/"+py.File {
		t.Fatalf("python = %+v, %v", py, ok)
	}
	for _, l := range c.Languages {
		if !c.HasImage(l.Image) {
			t.Errorf("language %s runs in %s, which the catalog does not list", l.Name, l.Image)
		}
		if _, err := os.Stat(filepath.Join(l.Image[len("sandboxd/"):], "packages")); err != nil {
			t.Errorf("image %s has no recipe folder: %v", l.Image, err)
		}
	}
	if _, ok := c.Language("cobol"); ok {
		t.Error("cobol is in the catalog")
	}
	if !c.HasImage(c.CommandImage) {
		t.Errorf("command image %s is not in the catalog", c.CommandImage)
	}
}

func TestLoadLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "images.lock")
	os.WriteFile(path, []byte(`{"images": [{"name": "sandboxd/python", "digest": "sha256:abc", "recipe": "sha256:def"}]}`), 0o644)
	l, err := LoadLock(path)
	if err != nil {
		t.Fatal(err)
	}
	if l.Digest("sandboxd/python") != "sha256:abc" || l.Digest("sandboxd/shell") != "" {
		t.Fatalf("lock = %+v", l)
	}
	os.WriteFile(path, []byte(`{"images": [`), 0o644)
	if _, err := LoadLock(path); err == nil {
		t.Fatal("a truncated lock was accepted")
	}
}
