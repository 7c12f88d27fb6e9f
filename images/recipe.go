package images

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Language is a language that RunCode accepts.
type Language struct {
	// Name is what requests say: "python".
	Name string
	// Image runs it by default.
	Image string
	// File is the name the program gets in the code folder.
	File string
	// Command runs the program; CodeDir + "/" + File is its last element,
	// unless the language is compiled: then it runs what Compile built.
	Command []string
	// Compile, for a compiled language, builds the program before it runs,
	// in the same task: CodeDir + "/" + File is its last element. When it
	// fails the program never runs and the run ends COMPILE_ERROR.
	Compile []string
}

// CodeDir is where a program is placed, read-only, in its container.
const CodeDir = "/code"

// RecipeFile is a recipe's file name in its folder.
const RecipeFile = "recipe"

// Prefix starts every image name: a recipe in folder python is the image
// sandboxd/python, whether built in or the operator's.
const Prefix = "sandboxd/"

// DefaultSuite is the Debian suite of a recipe that names none.
const DefaultSuite = "bookworm"

// BuilderVersion changes whenever the builder would make a different tree
// from the same recipe; it is part of every recipe digest.
const BuilderVersion = "1"

// Recipe is what an image is built from and what it serves: one folder with
// a recipe file and, optionally, files to add. Its lines:
//
//	from NAME              start from the recipe NAME (its lines first)
//	suite SUITE            the Debian suite (default bookworm)
//	packages PKG...        Debian packages, PKG or PKG=VERSION
//	pip NAME==VERSION...   Python packages, pinned, installed with pip
//	                       from the index the build names (--pip-index)
//	npm NAME@VERSION...    npm packages, pinned, each dependency named
//	                       too, from the registry the build names
//	                       (--npm-registry), on tasks' NODE_PATH
//	files DIR              a folder beside the recipe, copied to /
//	remove PATH...         files of the packages the image does without
//	env KEY=VALUE          a variable every task of the image gets
//	language NAME FILE ARGV...   a language: the program is /code/FILE,
//	                       run as ARGV followed by its path
//	compile NAME ARGV...   NAME, declared above, is compiled: ARGV
//	                       followed by the program's path builds it, and
//	                       the language's ARGV alone runs what it built
//	preimport MODULE...    modules a pre-started interpreter imports
//	pool N                 warm containers to keep (default: --pool-size)
//	commands               this image runs commands that name no image
type Recipe struct {
	// Name is the image's name, Prefix + the folder's name.
	Name string
	// Source is where the recipe was read, for messages.
	Source string
	// From is the name of the recipe this one starts from, or "".
	From     string
	Suite    string
	Packages []string
	// Pip are the Python packages, NAME==VERSION, pip installs.
	Pip []string
	// Npm are the npm packages, NAME@VERSION, installed side by side in
	// NpmDir.
	Npm       []string
	Remove    []string
	Env       []string
	Languages []Language
	Preimport []string
	// Pool is the warm pool's size, or -1 for the daemon's.
	Pool     int
	Commands bool
	// Digest is the SHA-256 of everything the image is built from: the
	// recipe, its files, the recipe it starts from and the builder.
	Digest string

	// Files are the files to add: path below / to content.
	Files map[string][]byte
	// lines are where each package was named (file:line), for a build's
	// errors.
	lines map[string]string
}

// Importable is what a program can import in the image, in the recipe's
// order: the Python modules of Debian's python3-X packages as X (but pip,
// which is a tool), and pip's and npm's packages by name.
func (r Recipe) Importable() []string {
	var out []string
	for _, p := range r.Packages {
		name, _, _ := strings.Cut(p, "=")
		if mod, ok := strings.CutPrefix(name, "python3-"); ok && mod != "pip" {
			out = append(out, mod)
		}
	}
	for _, p := range r.Pip {
		name, _, _ := strings.Cut(p, "==")
		out = append(out, name)
	}
	for _, p := range r.Npm {
		// @scope/name@1.0: the version follows the last @.
		if i := strings.LastIndex(p, "@"); i > 0 {
			p = p[:i]
		}
		out = append(out, p)
	}
	return out
}

// imageName is what an image's folder may be called: a Docker repository
// path component.
var imageName = regexp.MustCompile(`^[a-z0-9]+(?:[._-][a-z0-9]+)*$`)

// languageName is what a language may be called.
var languageName = regexp.MustCompile(`^[a-z][a-z0-9+#-]*$`)

// packageSpec is a Debian package name with an optional version.
var packageSpec = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+(=[A-Za-z0-9.+~:-]+)?$`)

// ParseRecipe reads the recipe in the folder dir of fsys; the folder's
// name is the image's. source names it in errors, which give the line.
func ParseRecipe(fsys fs.FS, dir, source string) (Recipe, error) {
	short := path.Base(dir)
	if !imageName.MatchString(short) {
		return Recipe{}, fmt.Errorf("recipe %s: the folder name %q is not an image name (lower-case letters, digits, and . _ - between them)", source, short)
	}
	src, err := fs.ReadFile(fsys, path.Join(dir, RecipeFile))
	if err != nil {
		return Recipe{}, fmt.Errorf("recipe %s: %w", source, err)
	}
	r := Recipe{Name: Prefix + short, Source: source, Pool: -1, lines: map[string]string{}}
	file := path.Join(source, RecipeFile)
	var filesDir string
	sc := bufio.NewScanner(bytes.NewReader(src))
	for n := 1; sc.Scan(); n++ {
		fail := func(format string, args ...any) error {
			return fmt.Errorf("%s:%d: %s", file, n, fmt.Sprintf(format, args...))
		}
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		key, args := fields[0], fields[1:]
		one := func() (string, error) {
			if len(args) != 1 {
				return "", fail("%s takes one value, not %d", key, len(args))
			}
			return args[0], nil
		}
		switch key {
		case "from":
			v, err := one()
			if err != nil {
				return Recipe{}, err
			}
			if !imageName.MatchString(strings.TrimPrefix(v, Prefix)) {
				return Recipe{}, fail("from: %q is not an image name", v)
			}
			r.From = Prefix + strings.TrimPrefix(v, Prefix)
		case "suite":
			if r.Suite, err = one(); err != nil {
				return Recipe{}, err
			}
		case "packages":
			if len(args) == 0 {
				return Recipe{}, fail("packages names no package")
			}
			for _, p := range args {
				if !packageSpec.MatchString(p) {
					return Recipe{}, fail("packages: %q is not a Debian package name (NAME or NAME=VERSION)", p)
				}
				r.Packages = append(r.Packages, p)
				r.lines[packageName(p)] = fmt.Sprintf("%s:%d", file, n)
			}
		case "pip", "npm":
			// Both kinds are pinned, so that the image builds bit for bit.
			list, lineKey, cut, form := &r.Pip, pipKey, cutPip, "NAME==VERSION: a Python package"
			if key == "npm" {
				list, lineKey, cut, form = &r.Npm, npmKey, cutNpmName, "NAME@VERSION with an exact version: an npm package"
			}
			if len(args) == 0 {
				return Recipe{}, fail("%s names no package", key)
			}
			for _, p := range args {
				name, ok := cut(p)
				if !ok {
					return Recipe{}, fail("%s: %q is not %s is pinned, so that the image builds bit for bit", key, p, form)
				}
				*list = append(*list, p)
				r.lines[lineKey(name)] = fmt.Sprintf("%s:%d", file, n)
			}
		case "files":
			if filesDir, err = one(); err != nil {
				return Recipe{}, err
			}
			if !fs.ValidPath(filesDir) || filesDir == "." {
				return Recipe{}, fail("files: %q is not a folder below the recipe's", filesDir)
			}
		case "remove":
			for _, p := range args {
				if !fs.ValidPath(p) || p == "." {
					return Recipe{}, fail("remove: %q is not a relative path below /", p)
				}
			}
			r.Remove = append(r.Remove, args...)
		case "env":
			v, err := one()
			if err != nil {
				return Recipe{}, err
			}
			if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
				return Recipe{}, fail("env: %q is not KEY=VALUE", v)
			}
			r.Env = append(r.Env, v)
		case "language":
			if len(args) < 3 {
				return Recipe{}, fail("language takes NAME FILE ARGV..., e.g. language python main.py python3")
			}
			name, file := args[0], args[1]
			if !languageName.MatchString(name) {
				return Recipe{}, fail("language: %q is not a language name", name)
			}
			if !fs.ValidPath(file) || strings.Contains(file, "/") {
				return Recipe{}, fail("language %s: %q is not a file name", name, file)
			}
			r.Languages = append(r.Languages, Language{Name: name, Image: r.Name, File: file,
				Command: append(slices.Clone(args[2:]), CodeDir+"/"+file)})
		case "compile":
			if len(args) < 2 {
				return Recipe{}, fail("compile takes NAME ARGV..., e.g. compile c gcc -o /tmp/program")
			}
			i := slices.IndexFunc(r.Languages, func(l Language) bool { return l.Name == args[0] })
			if i < 0 {
				return Recipe{}, fail("compile: no language %q is declared above this line", args[0])
			}
			l := &r.Languages[i]
			if l.Compile != nil {
				return Recipe{}, fail("compile: language %s is compiled already", l.Name)
			}
			if len(l.Command) < 2 {
				return Recipe{}, fail("compile: language %s names no command to run what it builds", l.Name)
			}
			source := l.Command[len(l.Command)-1]
			l.Command = l.Command[:len(l.Command)-1]
			l.Compile = append(slices.Clone(args[1:]), source)
		case "preimport":
			r.Preimport = append(r.Preimport, args...)
		case "pool":
			v, err := one()
			if err != nil {
				return Recipe{}, err
			}
			if r.Pool, err = strconv.Atoi(v); err != nil || r.Pool < 0 || r.Pool > 64 {
				return Recipe{}, fail("pool: %q is not a number of containers from 0 to 64", v)
			}
		case "commands":
			if len(args) != 0 {
				return Recipe{}, fail("commands takes no value")
			}
			r.Commands = true
		default:
			return Recipe{}, fail("%q is not a recipe line (from, suite, packages, pip, npm, files, remove, env, language, compile, preimport, pool, commands)", key)
		}
	}
	if r.From == "" && len(r.Packages) == 0 {
		return Recipe{}, fmt.Errorf("%s: a recipe that starts from no other names its packages", file)
	}
	if r.From == r.Name {
		return Recipe{}, fmt.Errorf("%s: the recipe starts from itself", file)
	}
	if filesDir != "" {
		if r.Files, err = readFiles(fsys, path.Join(dir, filesDir)); err != nil {
			return Recipe{}, fmt.Errorf("%s: files: %w", file, err)
		}
	}
	r.Digest = digest(src, r.Files)
	return r, nil
}

// packageName is the name of a package spec.
func packageName(spec string) string {
	name, _, _ := strings.Cut(spec, "=")
	return name
}

// pipSpec is a pinned Python package: a distribution name (PEP 508) and an
// exact version.
var pipSpec = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?==[A-Za-z0-9][A-Za-z0-9.+!_-]*$`)

// PipName is a Python distribution's name as indexes and installers
// compare it (PEP 503): lower case, each run of - _ . one -.
func PipName(name string) string {
	return strings.ToLower(pipRuns.ReplaceAllString(name, "-"))
}

var pipRuns = regexp.MustCompile(`[-_.]+`)

// pipKey keys a Python package's line apart from a Debian package's.
func pipKey(name string) string { return "pip:" + PipName(name) }

// cutPip is the name of a pip line's package, if it is pinned.
func cutPip(spec string) (string, bool) {
	name, _, ok := strings.Cut(spec, "==")
	return name, ok && pipSpec.MatchString(spec)
}

// WherePip is the recipe line (file:line) that names the Python package,
// or "".
func (r Recipe) WherePip(name string) string { return r.lines[pipKey(name)] }

// NpmDir is where a recipe's npm packages are installed, each in a folder
// of its name; tasks of an image with npm lines get it as NODE_PATH.
const NpmDir = "/usr/local/lib/node_modules"

// npmSpec is a pinned npm package: a name, scoped or not, and an exact
// semantic version.
var npmSpec = regexp.MustCompile(`^((@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*)@(\d+\.\d+\.\d+([-+][0-9A-Za-z.+-]+)?)$`)

// CutNpm splits an npm line's package into its name and version.
func CutNpm(spec string) (name, version string, ok bool) {
	m := npmSpec.FindStringSubmatch(spec)
	if m == nil {
		return "", "", false
	}
	return m[1], m[3], true
}

// npmKey keys an npm package's line apart from the others.
func npmKey(name string) string { return "npm:" + name }

// cutNpmName is the name of an npm line's package, if it is pinned.
func cutNpmName(spec string) (string, bool) {
	name, _, ok := CutNpm(spec)
	return name, ok
}

// WhereNpm is the recipe line (file:line) that names the npm package, or
// "".
func (r Recipe) WhereNpm(name string) string { return r.lines[npmKey(name)] }

// Where is the recipe line (file:line) that names the package, in this
// recipe or the one it starts from, or "".
func (r Recipe) Where(pkg string) string { return r.lines[packageName(pkg)] }

// readFiles reads every regular file below dir.
func readFiles(fsys fs.FS, dir string) (map[string][]byte, error) {
	files := map[string][]byte{}
	err := fs.WalkDir(fsys, dir, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir():
			return nil
		case !d.Type().IsRegular():
			return fmt.Errorf("%s is not a regular file", p)
		}
		b, err := fs.ReadFile(fsys, p)
		rel := strings.TrimPrefix(p, dir+"/")
		files[rel] = b
		return err
	})
	return files, err
}

// digest hashes a recipe's text and files with the builder's version.
// Modes are not hashed: the builder installs every file 0644, root's.
func digest(src []byte, files map[string][]byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "sandboxd recipe, builder %s\n%d\n", BuilderVersion, len(src))
	h.Write(src)
	for _, p := range slices.Sorted(maps.Keys(files)) {
		fmt.Fprintf(h, "%s\n%d\n", p, len(files[p]))
		h.Write(files[p])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// Resolve completes a recipe that starts from another with that recipe's
// lines: its packages, files, removals, environment and languages first,
// then this recipe's. The digest then covers both.
func Resolve(recipes []Recipe) ([]Recipe, error) {
	byName := map[string]int{}
	for i, r := range recipes {
		if j, ok := byName[r.Name]; ok {
			return nil, fmt.Errorf("recipe %s: image %s is also the recipe %s", r.Source, r.Name, recipes[j].Source)
		}
		byName[r.Name] = i
	}
	out := make([]Recipe, len(recipes))
	done := make([]bool, len(recipes))
	var resolve func(i int, seen []string) error
	resolve = func(i int, seen []string) error {
		if done[i] {
			return nil
		}
		r := recipes[i]
		if slices.Contains(seen, r.Name) {
			return fmt.Errorf("recipe %s: it starts from itself through %s", r.Source, strings.Join(seen, " -> "))
		}
		if r.From == "" {
			if r.Suite == "" {
				r.Suite = DefaultSuite
			}
			out[i], done[i] = r, true
			return nil
		}
		j, ok := byName[r.From]
		if !ok {
			return fmt.Errorf("recipe %s: from %s: no such recipe", r.Source, r.From)
		}
		if err := resolve(j, append(seen, r.Name)); err != nil {
			return err
		}
		if r.Suite != "" && r.Suite != out[j].Suite {
			return fmt.Errorf("recipe %s: suite %s differs from the suite %s of %s, which it starts from", r.Source, r.Suite, out[j].Suite, r.From)
		}
		out[i], done[i] = inherit(out[j], r), true
		return nil
	}
	for i := range recipes {
		if err := resolve(i, nil); err != nil {
			return nil, err
		}
	}
	for i, r := range out {
		// Node.js finds the npm packages where they are installed; a
		// recipe's own NODE_PATH stands.
		if len(r.Npm) > 0 && !slices.ContainsFunc(r.Env, func(e string) bool { return strings.HasPrefix(e, "NODE_PATH=") }) {
			out[i].Env = append(slices.Clone(r.Env), "NODE_PATH="+NpmDir)
		}
	}
	return out, nil
}

// inherit is r on top of base.
func inherit(base, r Recipe) Recipe {
	out := r
	out.Suite = base.Suite
	out.Packages = append(slices.Clone(base.Packages), r.Packages...)
	out.Pip = append(slices.Clone(base.Pip), r.Pip...)
	out.Npm = append(slices.Clone(base.Npm), r.Npm...)
	out.Remove = append(slices.Clone(base.Remove), r.Remove...)
	out.Env = append(slices.Clone(base.Env), r.Env...)
	out.Preimport = append(slices.Clone(base.Preimport), r.Preimport...)
	// The base's languages run here too, unless this recipe redefines
	// them; either way they run in this image.
	out.Languages = nil
	for _, l := range base.Languages {
		if !slices.ContainsFunc(r.Languages, func(m Language) bool { return m.Name == l.Name }) {
			l.Image = r.Name
			out.Languages = append(out.Languages, l)
		}
	}
	out.Languages = append(out.Languages, r.Languages...)
	out.Files = maps.Clone(base.Files)
	if out.Files == nil {
		out.Files = map[string][]byte{}
	}
	maps.Copy(out.Files, r.Files)
	out.lines = maps.Clone(base.lines)
	maps.Copy(out.lines, r.lines)
	h := sha256.Sum256([]byte(base.Digest + "\n" + r.Digest))
	out.Digest = "sha256:" + hex.EncodeToString(h[:])
	return out
}

// LoadDir reads every recipe in the folders of dir: dir/NAME/recipe.
func LoadDir(dir string) ([]Recipe, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("images dir: %w", err)
	}
	var recipes []Recipe
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, e.Name(), RecipeFile)); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		r, err := ParseRecipe(os.DirFS(dir), e.Name(), filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		recipes = append(recipes, r)
	}
	return recipes, nil
}
