// Package images describes the sandbox images: which image runs which
// language and how, and the lock file that records the digest of each image
// when it was built. The recipes themselves are the folders next to this
// file (one per image, built offline by scripts/build-images.sh).
package images

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sync"
)

// Language is a language that RunCode accepts.
type Language struct {
	// Name is what requests say: "python".
	Name string
	// Image runs it by default.
	Image string
	// File is the name the program gets in the code folder.
	File string
	// Command runs the program; CodeDir + "/" + File is its last element.
	Command []string
}

// CodeDir is where a program is placed, read-only, in its container.
const CodeDir = "/code"

// Catalog lists what a daemon can run.
type Catalog struct {
	Languages []Language
	// Images are the names a request may pick.
	Images []string
	// CommandImage runs RunCommand requests that name no image.
	CommandImage string
}

// Default is the catalog of the images built from this folder.
func Default() Catalog {
	return Catalog{
		Languages: []Language{
			{Name: "python", Image: "sandboxd/python", File: "main.py", Command: []string{"python3", CodeDir + "/main.py"}},
			{Name: "bash", Image: "sandboxd/shell", File: "main.sh", Command: []string{"bash", CodeDir + "/main.sh"}},
			{Name: "sh", Image: "sandboxd/shell", File: "main.sh", Command: []string{"sh", CodeDir + "/main.sh"}},
		},
		Images:       []string{"sandboxd/python", "sandboxd/shell"},
		CommandImage: "sandboxd/shell",
	}
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
	// Digest is the image ID the engine gave the image.
	Digest string `json:"digest"`
	// Recipe is the digest of the recipe it was built from.
	Recipe string `json:"recipe"`
}

// LoadLock reads a lock file written by scripts/build-images.sh.
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
	for _, im := range l.Images {
		if im.Name == name {
			return im.Digest
		}
	}
	return ""
}

// LockFile is a lock on disk, read again whenever the file changes, so that
// a daemon sees images rebuilt while it runs. A missing file is an empty
// lock.
type LockFile struct {
	path string

	mu    sync.Mutex
	stamp string // size and modification time of what lock holds
	lock  Lock
}

// OpenLock returns the lock at path; it is read on first use.
func OpenLock(path string) *LockFile { return &LockFile{path: path} }

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
		f.stamp, f.lock = "", Lock{}
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
	f.stamp, f.lock = stamp, l
	return l, nil
}

// Has says whether the lock names the image digest.
func (l Lock) Has(digest string) bool {
	return slices.ContainsFunc(l.Images, func(im Locked) bool { return im.Digest == digest })
}
