//go:build integration

package builder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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

// TestSameRecipeBuildsTheSameImage builds the shell image twice: the same
// digest, the same archive byte for byte, and the package list dpkg has.
func TestSameRecipeBuildsTheSameImage(t *testing.T) {
	requireDebootstrap(t)
	r, ok := images.Default().Recipe("sandboxd/shell")
	if !ok {
		t.Fatal("no shell recipe")
	}
	var digests, sums []string
	for range 2 {
		tmp := t.TempDir()
		img, err := Build(context.Background(), r, Options{TempDir: tmp})
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, img.Digest)
		sums = append(sums, fileSum(t, img.Archive))
		if !slices.ContainsFunc(img.Packages, func(p images.Package) bool { return p.Name == "bash" && p.Version != "" && p.Architecture != "" }) {
			t.Errorf("packages = %v, no bash", img.Packages)
		}
		os.Remove(img.Archive)
		if left, _ := os.ReadDir(tmp); len(left) > 0 {
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
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "broken"), 0o755)
	os.WriteFile(filepath.Join(dir, "broken", images.RecipeFile), []byte("# a typo\npackages bash\npackages coreutils no-such-package-sandboxd\n"), 0o644)
	recipes, err := images.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	resolved, err := images.Resolve(recipes)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	_, err = Build(context.Background(), resolved[0], Options{TempDir: tmp})
	want := "no-such-package-sandboxd (" + filepath.Join(dir, "broken", images.RecipeFile) + ":3)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want it to name %s", err, want)
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("the failed build left %v behind", left)
	}
}
