package builder

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/images"
)

// npmTarball is a package tarball of files (path: content), below
// package/ as registries have it.
func npmTarball(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, content := range files {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg})
		tw.Write([]byte(content))
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

func integrity(b []byte) string {
	sum := sha512.Sum512(b)
	return "sha512-" + base64.StdEncoding.EncodeToString(sum[:])
}

// npmRegistry serves packages (name -> version -> tarball, with
// dependencies deps) as a registry does; bad names a version whose
// advertised digest is wrong.
func npmRegistry(t *testing.T, tarballs map[string][]byte, deps map[string]map[string]string, bad string) *httptest.Server {
	t.Helper()
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b, ok := tarballs[strings.TrimPrefix(r.URL.Path, "/tarballs/")]; ok {
			w.Write(b)
			return
		}
		name := strings.Replace(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "%2f", "/", 1)
		versions := map[string]any{}
		for key, b := range tarballs {
			n, v, _ := images.CutNpm(key)
			if n != name {
				continue
			}
			digest := integrity(b)
			if key == bad {
				digest = integrity([]byte("something else"))
			}
			versions[v] = map[string]any{"dependencies": deps[key], "dist": map[string]string{"tarball": srv.URL + "/tarballs/" + key, "integrity": digest}}
		}
		if len(versions) == 0 {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"name": name, "versions": versions})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestNpmRegistryIsAskedFirst: a version the registry lacks and a
// dependency no line names fail before anything is built, naming the
// lines; a recipe with npm lines needs a registry.
func TestNpmRegistryIsAskedFirst(t *testing.T) {
	reg := npmRegistry(t, map[string][]byte{"left-pad@1.3.0": npmTarball(t, map[string]string{"package/index.js": "x"})},
		map[string]map[string]string{"left-pad@1.3.0": {"@scope/dep": "^1.0.0"}}, "")
	r, file := recipeOf(t, "packages nodejs\nnpm left-pad@1.3.0\nnpm left-pad@9.9.9\n")
	_, err := checkRegistry(context.Background(), r, reg.URL)
	for _, want := range []string{"has no left-pad@9.9.9 (" + file + ":3)", "left-pad@1.3.0 (" + file + ":3) depends on @scope/dep ^1.0.0, which no npm line names"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q", err, want)
		}
	}
	if _, err := checkRegistry(context.Background(), r, ""); err == nil || !strings.Contains(err.Error(), "--npm-registry") {
		t.Errorf("no registry: %v", err)
	}
}

// TestNpmUnpack installs packages checked against the registry's digest,
// a scoped one among them, and refuses a tarball that does not match it
// or that reaches out of its folder.
func TestNpmUnpack(t *testing.T) {
	tarballs := map[string][]byte{
		"tiny@1.0.0":       npmTarball(t, map[string]string{"package/package.json": `{"name":"tiny"}`, "package/index.js": "module.exports = 42\n"}),
		"@scope/dep@2.0.0": npmTarball(t, map[string]string{"package/index.js": "module.exports = 'dep'\n"}),
		"forged@1.0.0":     npmTarball(t, map[string]string{"package/index.js": "x"}),
		"escape@1.0.0":     npmTarball(t, map[string]string{"package/../../../etc/x": "x"}),
	}
	reg := npmRegistry(t, tarballs, map[string]map[string]string{"tiny@1.0.0": {"@scope/dep": "2.0.0"}}, "forged@1.0.0")
	r, _ := recipeOf(t, "packages nodejs\nnpm tiny@1.0.0 @scope/dep@2.0.0\n")
	pkgs, err := checkRegistry(context.Background(), r, reg.URL)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	got, err := npmInstall(context.Background(), r, root, pkgs)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != (images.Package{Name: "@scope/dep", Version: "2.0.0", Type: images.TypeNpm}) {
		t.Errorf("installed %v", got)
	}
	if b, _ := os.ReadFile(filepath.Join(root, images.NpmDir, "tiny", "index.js")); string(b) != "module.exports = 42\n" {
		t.Errorf("tiny/index.js = %q", b)
	}
	if _, err := os.Stat(filepath.Join(root, images.NpmDir, "@scope", "dep", "index.js")); err != nil {
		t.Error(err)
	}
	for spec, want := range map[string]string{"forged@1.0.0": "does not match the registry's digest", "escape@1.0.0": "leaves the package's folder"} {
		r, _ := recipeOf(t, "packages nodejs\nnpm "+spec+"\n")
		pkgs, err := checkRegistry(context.Background(), r, reg.URL)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := npmInstall(context.Background(), r, t.TempDir(), pkgs); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", spec, err, want)
		}
	}
}
