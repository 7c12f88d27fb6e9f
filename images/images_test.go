package images

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestBuiltin(t *testing.T) {
	c := Default()
	py, ok := c.Language("python")
	if !ok || py.Image != "sandboxd/python" || py.Command[len(py.Command)-1] != CodeDir+"/"+py.File {
		t.Fatalf("python = %+v, %v", py, ok)
	}
	for _, l := range c.Languages {
		if !c.HasImage(l.Image) {
			t.Errorf("language %s runs in %s, which the catalog does not list", l.Name, l.Image)
		}
	}
	if _, ok := c.Language("cobol"); ok {
		t.Error("cobol is in the catalog")
	}
	if c.CommandImage != "sandboxd/shell" {
		t.Errorf("command image = %s", c.CommandImage)
	}
	// The builder reads a recipe from disk, the daemon its embedded copy:
	// both must give the digest the lock records.
	for _, r := range c.Recipes {
		disk, err := ParseRecipe(os.DirFS("."), r.Name[len(Prefix):], "images/"+r.Name[len(Prefix):])
		if err != nil {
			t.Fatal(err)
		}
		if disk.Digest != r.Digest || !strings.HasPrefix(r.Digest, "sha256:") {
			t.Errorf("%s: digest on disk %s, embedded %s", r.Name, disk.Digest, r.Digest)
		}
	}
	// A compiled language builds from the program's path and runs what
	// it built.
	for name, compiler := range map[string]string{"c": "gcc", "cpp": "g++", "typescript": "node"} {
		l, ok := c.Language(name)
		if !ok || len(l.Compile) < 2 || l.Compile[0] != compiler || l.Compile[len(l.Compile)-1] != CodeDir+"/"+l.File || slices.Contains(l.Command, CodeDir+"/"+l.File) {
			t.Errorf("%s = %+v, %v; want compiled by %s from %s/%s", name, l, ok, compiler, CodeDir, l.File)
		}
	}
	if js, _ := c.Language("javascript"); js.Compile != nil || js.Image != "sandboxd/node" {
		t.Errorf("javascript = %+v, want node, not compiled", js)
	}
	if names := c.LanguageNames(); names[0] != "python" {
		t.Errorf("the catalog's languages are %q: python, the default, comes first", names)
	}
	py2, _ := c.Recipe("sandboxd/python")
	if !slices.Contains(py2.Preimport, "numpy") || py2.Where("python3-numpy") != "images/python/recipe:2" || len(py2.Files) == 0 {
		t.Errorf("python recipe = %+v", py2)
	}
}

// recipes writes each recipe text to dir/NAME/recipe.
func recipes(t *testing.T, texts map[string]string) string {
	dir := t.TempDir()
	for name, text := range texts {
		os.MkdirAll(filepath.Join(dir, name), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name, RecipeFile), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestRecipeErrorsNameTheLine(t *testing.T) {
	for text, want := range map[string]string{
		"packages bash\nfrobnicate 3\n":                                         `recipe:2: "frobnicate" is not a recipe line`,
		"# c\npackages bash Bad_Name\n":                                         `recipe:2: packages: "Bad_Name" is not a Debian package name`,
		"packages bash\npool many\n":                                            `recipe:2: pool: "many" is not a number`,
		"packages bash\nlanguage x\n":                                           `recipe:2: language takes NAME FILE ARGV`,
		"packages bash\nlanguage py ../main.py py\n":                            `recipe:2: language py: "../main.py" is not a file name`,
		"packages bash\nenv NOVALUE\n":                                          `recipe:2: env: "NOVALUE" is not KEY=VALUE`,
		"packages bash\nremove /etc/x\n":                                        `recipe:2: remove: "/etc/x" is not a relative path`,
		"packages bash\nfiles rootfs\n":                                         `files: stat`,
		"suite bookworm\n":                                                      `names its packages`,
		"packages gcc\ncompile c gcc -o /tmp/p\n":                               `recipe:2: compile: no language "c" is declared above this line`,
		"packages gcc\nlanguage c main.c /tmp/p\ncompile c gcc\ncompile c cc\n": `recipe:4: compile: language c is compiled already`,
		"packages gcc\nlanguage c main.c /tmp/p\ncompile c\n":                   `recipe:3: compile takes NAME ARGV`,
		"packages python3-pip\npip numpy\n":                                     `recipe:2: pip: "numpy" is not NAME==VERSION`,
		"packages python3-pip\npip numpy>=1.0\n":                                `recipe:2: pip: "numpy>=1.0" is not NAME==VERSION`,
		"packages python3-pip\npip\n":                                           `recipe:2: pip names no package`,
		"packages nodejs\nnpm left-pad\n":                                       `recipe:2: npm: "left-pad" is not NAME@VERSION`,
		"packages nodejs\nnpm left-pad@^1.3.0\n":                                `recipe:2: npm: "left-pad@^1.3.0" is not NAME@VERSION`,
	} {
		dir := recipes(t, map[string]string{"img": text})
		_, err := LoadDir(dir)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), filepath.Join(dir, "img")) {
			t.Errorf("%q: err = %v, want %q and the file", text, err, want)
		}
	}
	dir := recipes(t, map[string]string{"Bad": "packages bash\n"})
	if _, err := LoadDir(dir); err == nil || !strings.Contains(err.Error(), `"Bad" is not an image name`) {
		t.Errorf("err = %v", err)
	}
}

func TestFrom(t *testing.T) {
	dir := recipes(t, map[string]string{
		"data": "from python\npackages python3-polars=0.19-1\npip Tiny_Pkg==1.0\nenv A=b\npool 1\nnpm @scope/tiny@1.0.0-rc.1\n",
		"loop": "from loop2\n", "loop2": "from loop\n",
	})
	own, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewCatalog(append(Builtin(), own...)); err == nil || !strings.Contains(err.Error(), "starts from itself through") {
		t.Fatalf("a loop of recipes: err = %v", err)
	}
	os.RemoveAll(filepath.Join(dir, "loop"))
	os.RemoveAll(filepath.Join(dir, "loop2"))
	c, err := WithDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	// python's default image stays the one that declares it; the derived
	// image runs it when a request names that image.
	if l, _ := c.Language("python"); l.Image != "sandboxd/python" {
		t.Errorf("python runs in %s by default", l.Image)
	}
	if l, ok := c.Recipes[len(c.Recipes)-1].Language("python"); !ok || l.Image != "sandboxd/data" {
		t.Errorf("data runs python as %+v, %v", l, ok)
	}
	data, ok := c.Recipe("sandboxd/data")
	py, _ := c.Recipe("sandboxd/python")
	if !ok || data.Suite != "bookworm" || data.Pool != 1 || !slices.Contains(data.Packages, "python3-numpy") ||
		!slices.Contains(data.Packages, "python3-polars=0.19-1") || len(data.Files) != len(py.Files) || data.Digest == py.Digest {
		t.Fatalf("data = %+v", data)
	}
	if w := data.Where("python3-polars"); w != filepath.Join(dir, "data", RecipeFile)+":2" {
		t.Errorf("polars named at %q", w)
	}
	if w := data.Where("python3-numpy"); w != "images/python/recipe:2" {
		t.Errorf("numpy named at %q", w)
	}
	// A Python package's name is compared as indexes compare it.
	if w := data.WherePip("tiny-pkg"); !slices.Equal(data.Pip, []string{"Tiny_Pkg==1.0"}) || w != filepath.Join(dir, "data", RecipeFile)+":3" {
		t.Errorf("pip %q named at %q", data.Pip, w)
	}
	// npm packages are found on NODE_PATH.
	if w := data.WhereNpm("@scope/tiny"); !slices.Equal(data.Npm, []string{"@scope/tiny@1.0.0-rc.1"}) || w != filepath.Join(dir, "data", RecipeFile)+":6" ||
		!slices.Contains(data.Env, "NODE_PATH="+NpmDir) || slices.Contains(py.Env, "NODE_PATH="+NpmDir) {
		t.Errorf("npm %q named at %q, env %q", data.Npm, w, data.Env)
	}
	if _, err := NewCatalog([]Recipe{data}); err == nil || !strings.Contains(err.Error(), "no such recipe") {
		t.Errorf("a missing base: err = %v", err)
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

func TestDiffPackages(t *testing.T) {
	deb := func(name, version, arch string) Package {
		return Package{Name: name, Version: version, Architecture: arch}
	}
	pip := Package{Name: "six", Version: "1.16.0", Type: TypePyPI}
	recorded := []Package{deb("bash", "5.2.15-2+b2", "amd64"), deb("libc6", "2.36-9", "amd64"), pip, deb("zlib1g", "1:1.2.13", "amd64")}
	built := []Package{deb("bash", "5.2.15-2+b7", "amd64"), deb("libc6", "2.36-9", "amd64"), deb("six", "1.16.0", "all"), deb("tzdata", "2024a", "all")}
	// The Debian package six is not the Python package six.
	want := []string{"bash 5.2.15-2+b2 (amd64) is now 5.2.15-2+b7 (amd64)", "pip six 1.16.0 is gone", "zlib1g 1:1.2.13 is gone", "six 1.16.0 is new", "tzdata 2024a is new"}
	if got := DiffPackages(recorded, built); !slices.Equal(got, want) {
		t.Errorf("DiffPackages = %q, want %q", got, want)
	}
	if got := DiffPackages(recorded, recorded); len(got) != 0 {
		t.Errorf("the same packages differ: %q", got)
	}
}

// TestSPDXNamesEachPackage: the SBOM has the image and a package URL for
// each package, Debian's with architecture and suite, Python's as PyPI
// names them.
func TestSPDXNamesEachPackage(t *testing.T) {
	doc := SPDX(Locked{Name: "sandboxd/data", Digest: "sha256:ab", Recipe: "sha256:cd", Suite: "bookworm", Packages: []Package{
		{Name: "bash", Version: "5.2.15-2+b13", Architecture: "amd64"},
		{Name: "Tiny_Pkg", Version: "1.0", Type: TypePyPI},
		{Name: "@scope/tiny", Version: "1.0.0", Type: TypeNpm}, {Name: "left-pad", Version: "1.3.0", Type: TypeNpm},
	}})
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"pkg:deb/debian/bash@5.2.15-2%2Bb13?arch=amd64\u0026distro=bookworm"`, `"pkg:pypi/tiny-pkg@1.0"`, `"pkg:npm/%40scope/tiny@1.0.0"`, `"pkg:npm/left-pad@1.3.0"`, `"versionInfo":"sha256:ab"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the SBOM lacks %s: %s", want, b)
		}
	}
}

// TestLockFileSaysWhatChanged: a lock file read again after it changed
// calls OnChange with the lock before and after, not at its first read,
// and Changes names the images added, removed and rebuilt.
func TestLockFileSaysWhatChanged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "images.lock")
	f := OpenLock(path)
	var calls [][3][]string
	f.OnChange(func(prev, next Lock) {
		a, r, b := Changes(prev, next)
		calls = append(calls, [3][]string{a, r, b})
	})
	write := func(l Lock, mtime int64) {
		t.Helper()
		if err := l.Write(path); err != nil {
			t.Fatal(err)
		}
		// The stamp is size and mtime: a rewrite within the clock's tick
		// must still read as a change.
		if err := os.Chtimes(path, time.Unix(mtime, 0), time.Unix(mtime, 0)); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Lock(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.Lock(); err != nil { // missing: the first read
		t.Fatal(err)
	}
	write(Lock{Images: []Locked{{Name: "sandboxd/python", Digest: "sha256:a"}, {Name: "sandboxd/node", Digest: "sha256:b"}}}, 1)
	write(Lock{Images: []Locked{{Name: "sandboxd/python", Digest: "sha256:c"}, {Name: "sandboxd/go", Digest: "sha256:d"}}}, 2)
	if _, err := f.Lock(); err != nil { // unchanged
		t.Fatal(err)
	}
	want := [][3][]string{
		{{"sandboxd/node", "sandboxd/python"}, nil, nil},
		{{"sandboxd/go"}, {"sandboxd/node"}, {"sandboxd/python"}},
	}
	if len(calls) != len(want) {
		t.Fatalf("OnChange calls: %q, want %q", calls, want)
	}
	for i := range want {
		for j := range 3 {
			if !slices.Equal(calls[i][j], want[i][j]) {
				t.Errorf("call %d: %q, want %q", i, calls[i], want[i])
			}
		}
	}
}

// TestImportable: a recipe's importable packages are its Debian python3-X
// modules (not pip), then pip's and npm's packages, by name.
func TestImportable(t *testing.T) {
	r := Recipe{Packages: []string{"python3", "python3-numpy", "python3-pip", "python3-pandas=1.5.3", "nodejs"},
		Pip: []string{"polars==1.2.0"}, Npm: []string{"lodash@4.17.21", "@scope/pkg@1.0.0"}}
	want := []string{"numpy", "pandas", "polars", "lodash", "@scope/pkg"}
	if got := r.Importable(); !slices.Equal(got, want) {
		t.Errorf("Importable() = %q, want %q", got, want)
	}
}
