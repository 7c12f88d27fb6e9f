//go:build integration

package builder

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/internal/testutil"
)

// requireDebootstrap skips (or, in CI, fails) without root and debootstrap.
func requireDebootstrap(t *testing.T) {
	t.Helper()
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("debootstrap"); err != nil {
		testutil.SkipOrFail(t, "debootstrap is not installed (scripts/setup.sh installs it)")
	}
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil))
}

// TestSameRecipeBuildsTheSameImage builds the shell image twice at once: the
// same digest, the same archive byte for byte, and the package list dpkg
// has. At once, because a build must not depend on its timing or on
// another build beside it, and because the two then share the wait on the
// mirror. Over 60 s: two debootstrap builds (55 s alone here; 140 s in
// CI's untimed lane, which takes what the engines leave); it is CI's proof
// that a recipe builds bit for bit.
func TestSameRecipeBuildsTheSameImage(t *testing.T) {
	requireDebootstrap(t)
	t.Parallel()
	r, ok := images.Default().Recipe("sandboxd/shell")
	if !ok {
		t.Fatal("no shell recipe")
	}
	tmps := []string{t.TempDir(), t.TempDir()}
	imgs := make([]Image, len(tmps))
	errs := make([]error, len(tmps))
	var wg sync.WaitGroup
	for i, tmp := range tmps {
		wg.Go(func() { imgs[i], errs[i] = Build(context.Background(), r, Options{TempDir: tmp}) })
	}
	wg.Wait()
	var digests, sums []string
	for i, img := range imgs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		digests = append(digests, img.Digest)
		sums = append(sums, fileSum(t, img.Archive))
		if !slices.ContainsFunc(img.Packages, func(p images.Package) bool { return p.Name == "bash" && p.Version != "" && p.Architecture != "" }) {
			t.Errorf("packages = %v, no bash", img.Packages)
		}
		os.Remove(img.Archive)
		if left, _ := os.ReadDir(tmps[i]); len(left) > 0 {
			t.Errorf("the build left %v behind", left)
		}
	}
	t.Logf("digests %q, archives %q", digests, sums)
	if digests[0] != digests[1] || sums[0] != sums[1] {
		t.Fatalf("two builds of one recipe: digests %q, archives %q", digests, sums)
	}
}

// TestBadPackageNamesTheRecipeLine: a package the mirror lacks is named
// with its recipe line, and the build leaves nothing behind.
func TestBadPackageNamesTheRecipeLine(t *testing.T) {
	requireDebootstrap(t)
	t.Parallel()
	r, file := recipeOf(t, "# a typo\npackages bash\npackages coreutils no-such-package-sandboxd\n")
	tmp := t.TempDir()
	_, err := Build(context.Background(), r, Options{TempDir: tmp})
	want := "no-such-package-sandboxd (" + file + ":3)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want it to name %s", err, want)
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("the failed build left %v behind", left)
	}
}

// TestRecipePipAndNpmPackages builds a recipe with a pip line, from an
// index on loopback serving a wheel made here, and an npm line, from a
// registry on loopback: both packages are in the image's /usr/local (the
// Python one without bytecode) and in its package list. Over 60 s: a
// debootstrap build with Python and Node.js in it (78 s alone here; 175 s
// in CI's untimed lane beside the other builds).
func TestRecipePipAndNpmPackages(t *testing.T) {
	requireDebootstrap(t)
	t.Parallel()
	wheel := tinyWheel(t)
	index := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/simple/sandboxd-tiny/":
			sum := sha256.Sum256(wheel)
			fmt.Fprintf(w, `<a href="/files/sandboxd_tiny-1.0-py3-none-any.whl#sha256=%x">sandboxd_tiny-1.0-py3-none-any.whl</a>`, sum)
		case "/files/sandboxd_tiny-1.0-py3-none-any.whl":
			w.Write(wheel)
		default:
			http.NotFound(w, r)
		}
	}))
	defer index.Close()
	registry := npmRegistry(t, map[string][]byte{"sandboxd-tiny@1.0.0": npmTarball(t, map[string]string{"package/index.js": "module.exports = 42\n"})}, nil, "")
	r, _ := recipeOf(t, "packages python3-pip\npip sandboxd-tiny==1.0\nnpm sandboxd-tiny@1.0.0\n")
	img, err := Build(context.Background(), r, Options{TempDir: t.TempDir(), PipIndex: index.URL + "/simple/", NpmRegistry: registry.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(img.Archive)
	for _, p := range []images.Package{{Name: "sandboxd-tiny", Version: "1.0", Type: images.TypePyPI}, {Name: "sandboxd-tiny", Version: "1.0.0", Type: images.TypeNpm}} {
		if !slices.Contains(img.Packages, p) {
			t.Errorf("packages lack %v: %v", p, img.Packages)
		}
	}
	files := layerFiles(t, img.Archive)
	for _, f := range []string{"usr/local/lib/python3.11/dist-packages/sandboxd_tiny/__init__.py", "usr/local/lib/node_modules/sandboxd-tiny/index.js"} {
		if !slices.Contains(files, f) {
			t.Errorf("%s is not in the image", f)
		}
	}
	for _, f := range files {
		if strings.HasSuffix(f, ".pyc") && strings.Contains(f, "/usr/local/") {
			t.Errorf("bytecode in the image: %s", f)
		}
	}
}

// tinyWheel is a wheel of one module, sandboxd_tiny 1.0.
func tinyWheel(t *testing.T) []byte {
	t.Helper()
	files := [][2]string{
		{"sandboxd_tiny/__init__.py", "GREETING = 'from the index'\n"},
		{"sandboxd_tiny-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: sandboxd-tiny\nVersion: 1.0\n\n"},
		{"sandboxd_tiny-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: sandboxd-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, _ := zw.Create(f[0])
		io.WriteString(w, f[1])
		sum := sha256.Sum256([]byte(f[1]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f[0], base64.RawURLEncoding.EncodeToString(sum[:]), len(f[1]))
	}
	record.WriteString("sandboxd_tiny-1.0.dist-info/RECORD,,\n")
	w, _ := zw.Create("sandboxd_tiny-1.0.dist-info/RECORD")
	io.WriteString(w, record.String())
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// layerFiles lists the files of an image archive's one layer.
func layerFiles(t *testing.T, archive string) []string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	outer := tar.NewReader(f)
	for {
		h, err := outer.Next()
		if err != nil {
			t.Fatalf("no layer in %s: %v", archive, err)
		}
		if !strings.HasSuffix(h.Name, "/layer.tar") {
			continue
		}
		var names []string
		inner := tar.NewReader(outer)
		for {
			h, err := inner.Next()
			if err == io.EOF {
				return names
			}
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, strings.TrimPrefix(h.Name, "./"))
		}
	}
}
