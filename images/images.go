// Package images is the sandbox images' catalog: the recipes that say what
// each image is built from and which languages it runs and how (built in,
// in the folders next to this file, and an operator's), and the lock file
// that records what each image was when this host built it.
package images

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/moby/sys/atomicwriter"
)

// Catalog lists what a daemon can run: its recipes, resolved.
type Catalog struct {
	Recipes   []Recipe
	Languages []Language
	// Images are the names a request may pick.
	Images []string
	// CommandImage runs RunCommand requests that name no image.
	CommandImage string
}

// builtin holds the recipes of the images sandboxd ships.
//
//go:embed gcc node python shell
var builtin embed.FS

// builtinFirst are the built-in recipes listed before the others (which
// follow by name): python's is the language a catalog offers first.
var builtinFirst = []string{"python", "shell"}

// Builtin returns the recipes sandboxd ships.
func Builtin() []Recipe {
	dirs, err := fs.ReadDir(builtin, ".")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	rank := func(name string) int {
		if i := slices.Index(builtinFirst, name); i >= 0 {
			return i
		}
		return len(builtinFirst)
	}
	slices.SortStableFunc(dirs, func(a, b fs.DirEntry) int { return rank(a.Name()) - rank(b.Name()) })
	var recipes []Recipe
	for _, d := range dirs {
		r, err := ParseRecipe(builtin, d.Name(), "images/"+d.Name())
		if err != nil {
			panic(err) // TestBuiltin keeps the shipped recipes valid
		}
		recipes = append(recipes, r)
	}
	return recipes
}

// NewCatalog resolves recipes into a catalog. A language's default image is
// the one whose recipe declares it; an image that starts from it runs it
// too, when a request names that image. Exactly one image runs commands.
func NewCatalog(recipes []Recipe) (Catalog, error) {
	resolved, err := Resolve(recipes)
	if err != nil {
		return Catalog{}, err
	}
	c := Catalog{Recipes: resolved}
	served := map[string]string{}
	for _, r := range resolved {
		c.Images = append(c.Images, r.Name)
		for _, l := range r.Languages {
			other, ok := served[l.Name]
			if ok && r.From != "" {
				continue
			}
			if ok {
				return Catalog{}, fmt.Errorf("recipe %s: language %s is already served by %s", r.Source, l.Name, other)
			}
			served[l.Name] = r.Name
			c.Languages = append(c.Languages, l)
		}
		if r.Commands {
			if c.CommandImage != "" {
				return Catalog{}, fmt.Errorf("recipe %s: commands: %s runs them already", r.Source, c.CommandImage)
			}
			c.CommandImage = r.Name
		}
	}
	if c.CommandImage == "" {
		return Catalog{}, errors.New("no recipe says commands: which image runs commands that name none?")
	}
	return c, nil
}

// Default is the catalog of the built-in recipes.
func Default() Catalog {
	c, err := NewCatalog(Builtin())
	if err != nil {
		panic(err) // TestBuiltin keeps the shipped recipes valid
	}
	return c
}

// WithDir is the catalog of the built-in recipes and those of an
// operator's folder (see LoadDir).
func WithDir(dir string) (Catalog, error) {
	if dir == "" {
		return Default(), nil
	}
	own, err := LoadDir(dir)
	if err != nil {
		return Catalog{}, err
	}
	return NewCatalog(append(Builtin(), own...))
}

// Language returns the language called name as the image runs it.
func (r Recipe) Language(name string) (Language, bool) {
	i := slices.IndexFunc(r.Languages, func(l Language) bool { return l.Name == name })
	if i < 0 {
		return Language{}, false
	}
	return r.Languages[i], true
}

// Recipe returns the recipe of the image called name.
func (c Catalog) Recipe(name string) (Recipe, bool) {
	i := slices.IndexFunc(c.Recipes, func(r Recipe) bool { return r.Name == name })
	if i < 0 {
		return Recipe{}, false
	}
	return c.Recipes[i], true
}

// Language returns the language called name.
func (c Catalog) Language(name string) (Language, bool) {
	i := slices.IndexFunc(c.Languages, func(l Language) bool { return l.Name == name })
	if i < 0 {
		return Language{}, false
	}
	return c.Languages[i], true
}

// HasImage says whether a request may name image.
func (c Catalog) HasImage(image string) bool {
	return slices.Contains(c.Images, image)
}

// LanguageNames lists the languages, in catalog order.
func (c Catalog) LanguageNames() []string {
	names := make([]string, len(c.Languages))
	for i, l := range c.Languages {
		names[i] = l.Name
	}
	return names
}

// Lock records the images as built on this host.
type Lock struct {
	Images []Locked `json:"images"`
}

// Locked is one built image.
type Locked struct {
	Name string `json:"name"`
	// Digest is the image's ID: the SHA-256 of its config.
	Digest string `json:"digest"`
	// Recipe is the digest of the recipe it was built from.
	Recipe string `json:"recipe"`
	// Suite is the Debian suite, and Packages what dpkg and pip installed.
	Suite    string    `json:"suite,omitempty"`
	Packages []Package `json:"packages,omitempty"`
}

// Package is one Debian package of an image.
type Package struct {
	Name         string `json:"name"`
	Version      string `json:"version"`
	Architecture string `json:"architecture"`
	// Type is "pypi" for a Python package pip installed, "npm" for an
	// npm package; empty for a Debian package.
	Type string `json:"type,omitempty"`
}

// The Types of packages that are not Debian's.
const (
	TypePyPI = "pypi"
	TypeNpm  = "npm"
)

// DiffPackages names how the packages of a build differ from those
// recorded: a version or architecture changed, a package gone, one added.
func DiffPackages(recorded, built []Package) []string {
	now := map[string]Package{}
	for _, p := range built {
		now[p.key()] = p
	}
	var diff []string
	for _, p := range recorded {
		q, ok := now[p.key()]
		switch {
		case !ok:
			diff = append(diff, fmt.Sprintf("%s %s is gone", p.label(), p.Version))
		case q.Version != p.Version || q.Architecture != p.Architecture:
			diff = append(diff, fmt.Sprintf("%s %s (%s) is now %s (%s)", p.label(), p.Version, p.Architecture, q.Version, q.Architecture))
		}
		delete(now, p.key())
	}
	for _, p := range built {
		if _, added := now[p.key()]; added {
			diff = append(diff, fmt.Sprintf("%s %s is new", p.label(), p.Version))
		}
	}
	return diff
}

// key tells a Python package from a Debian one of the same name.
func (p Package) key() string { return p.Type + "/" + p.Name }

// label names a package in messages: a Python package says so.
func (p Package) label() string {
	switch p.Type {
	case TypePyPI:
		return "pip " + p.Name
	case TypeNpm:
		return "npm " + p.Name
	}
	return p.Name
}

// Labels every sandbox image carries: its short name and the digest of its
// recipe.
const (
	LabelImage  = "io.sandboxd.image"
	LabelRecipe = "io.sandboxd.recipe"
)

// DefaultLockPath is where sandboxd image build records the images it
// loaded and the daemon reads them: the images live in the host's backends,
// so their lock is the host's too, not a checkout's.
const DefaultLockPath = "/var/lib/sandboxd/images.lock"

// LoadLock reads a lock file written by sandboxd image build.
func LoadLock(path string) (Lock, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Lock{}, err
	}
	var l Lock
	if err := json.Unmarshal(b, &l); err != nil {
		return Lock{}, fmt.Errorf("image lock %s: %w", path, err)
	}
	return l, nil
}

// Digest returns the locked digest of the image called name, or "".
func (l Lock) Digest(name string) string {
	im, _ := l.Entry(name)
	return im.Digest
}

// Entry returns the lock's entry of the image called name.
func (l Lock) Entry(name string) (Locked, bool) {
	i := slices.IndexFunc(l.Images, func(im Locked) bool { return im.Name == name })
	if i < 0 {
		return Locked{}, false
	}
	return l.Images[i], true
}

// LockFile is a lock on disk, read again whenever the file changes, so that
// a daemon sees images rebuilt while it runs. A missing file is an empty
// lock.
type LockFile struct {
	path string

	mu       sync.Mutex
	stamp    string // size and modification time of what lock holds
	lock     Lock
	read     bool // whether the file was read once
	onChange func(prev, next Lock)
}

// OpenLock returns the lock at path; it is read on first use.
func OpenLock(path string) *LockFile { return &LockFile{path: path} }

// OnChange has fn called, under the file's lock, when a read finds the
// file changed since the one before (not at the first read).
func (f *LockFile) OnChange(fn func(prev, next Lock)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onChange = fn
}

// set takes l, read at stamp, as the lock, and says so when it changed.
func (f *LockFile) set(stamp string, l Lock) {
	prev, read := f.lock, f.read
	f.stamp, f.lock, f.read = stamp, l, true
	if read && f.onChange != nil {
		f.onChange(prev, l)
	}
}

// Changes names the images next adds to prev, removes from it, and
// gives another digest, each list sorted.
func Changes(prev, next Lock) (added, removed, rebuilt []string) {
	for _, im := range next.Images {
		old, ok := prev.Entry(im.Name)
		switch {
		case !ok:
			added = append(added, im.Name)
		case old.Digest != im.Digest:
			rebuilt = append(rebuilt, im.Name)
		}
	}
	for _, im := range prev.Images {
		if _, ok := next.Entry(im.Name); !ok {
			removed = append(removed, im.Name)
		}
	}
	slices.Sort(added)
	slices.Sort(removed)
	slices.Sort(rebuilt)
	return added, removed, rebuilt
}

// Path is the file's path.
func (f *LockFile) Path() string { return f.path }

// Lock returns the lock as the file holds it now.
func (f *LockFile) Lock() (Lock, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.path == "" {
		return Lock{}, nil
	}
	st, err := os.Stat(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		if f.stamp != "" || !f.read {
			f.set("", Lock{})
		}
		return Lock{}, nil
	}
	if err != nil {
		return Lock{}, err
	}
	stamp := fmt.Sprintf("%d %d", st.Size(), st.ModTime().UnixNano())
	if stamp == f.stamp {
		return f.lock, nil
	}
	l, err := LoadLock(f.path)
	if err != nil {
		return Lock{}, err
	}
	f.set(stamp, l)
	return l, nil
}

// Put records im, in place of the entry of the same name.
func (l *Lock) Put(im Locked) {
	i := slices.IndexFunc(l.Images, func(o Locked) bool { return o.Name == im.Name })
	if i < 0 {
		l.Images = append(l.Images, im)
	} else {
		l.Images[i] = im
	}
	slices.SortFunc(l.Images, func(a, b Locked) int { return strings.Compare(a.Name, b.Name) })
}

// Write writes the lock to path atomically: a reader sees the old lock or
// the new one.
func (l Lock) Write(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	return atomicwriter.WriteFile(path, append(b, '\n'), 0o644)
}

// Has says whether the lock names the image digest.
func (l Lock) Has(digest string) bool {
	return slices.ContainsFunc(l.Images, func(im Locked) bool { return im.Digest == digest })
}
