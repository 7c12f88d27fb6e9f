package builder

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/images"
)

func TestHasVersion(t *testing.T) {
	files := []string{"Tiny_Pkg-1.0-py3-none-any.whl", "tiny-pkg-1.1.tar.gz", "other-2.0.zip"}
	for _, c := range []struct {
		name, version string
		want          bool
	}{
		{"tiny-pkg", "1.0", true}, {"Tiny.Pkg", "1.1", true}, {"tiny_pkg", "1.0.1", false},
		{"tiny-pkg", "1", false}, {"other", "2.0", true}, {"tiny", "pkg-1.0", false},
	} {
		if got := hasVersion(files, c.name, c.version); got != c.want {
			t.Errorf("%s==%s: %v, want %v", c.name, c.version, got, c.want)
		}
	}
}

// TestIndexIsAskedFirst: a pinned package the index lacks, or one it has
// in other versions only, fails the build before debootstrap, naming the
// recipe line; a recipe with pip lines needs an index.
func TestIndexIsAskedFirst(t *testing.T) {
	index := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/simple/tiny-pkg/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, `<html><body><a href="../../f/tiny_pkg-1.0-py3-none-any.whl#sha256=00">tiny_pkg-1.0-py3-none-any.whl</a></body></html>`)
	}))
	defer index.Close()
	r, file := recipeOf(t, "packages python3-pip\npip Tiny-Pkg==1.0\npip tiny-pkg==2.0 absent==1\n")
	line := file + ":3"
	err := checkIndex(context.Background(), r, index.URL+"/simple/")
	for _, want := range []string{"has no tiny-pkg==2.0 (" + line + ")", "has no package absent (" + line + ")"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "Tiny-Pkg==1.0") {
		t.Errorf("the package the index has is named: %v", err)
	}
	tmp := t.TempDir()
	_, err = Build(context.Background(), r, Options{TempDir: tmp})
	if err == nil || !strings.Contains(err.Error(), "--pip-index") {
		t.Errorf("a build with no index: %v", err)
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("the refused build left %v", left)
	}
}

// recipeOf is the recipe of text, resolved, in a folder of its own, and
// its file's path.
func recipeOf(t *testing.T, text string) (images.Recipe, string) {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "img", images.RecipeFile)
	os.MkdirAll(filepath.Dir(file), 0o755)
	os.WriteFile(file, []byte(text), 0o644)
	recipes, err := images.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	resolved, err := images.Resolve(recipes)
	if err != nil {
		t.Fatal(err)
	}
	return resolved[0], file
}
