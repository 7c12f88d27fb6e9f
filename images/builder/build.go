// Package builder builds a sandbox image from its recipe, offline and bit for
// bit: debootstrap from the Debian mirror apt uses, the recipe's files and
// removals, its pinned Python and npm packages from the operator's index and
// registry, then everything that would differ between two builds of the
// same packages normalised (logs, caches, machine ids, password ages,
// bytecode, times, order), written as a one-layer image archive whose
// digest depends only on the recipe and the package versions. Loading the
// archive into Docker or containerd is the backends' business.
package builder

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"slices"
	"sort"
	"strings"

	"github.com/sandboxd/sandboxd/images"
)

// Options configure a build.
type Options struct {
	// Mirror is the Debian mirror's URI; empty means the one apt uses.
	Mirror string
	// PipIndex is the Python package index (PEP 503 simple) a recipe's
	// pip lines are installed from; a recipe with pip lines needs one.
	PipIndex string
	// NpmRegistry is the npm registry a recipe's npm lines are installed
	// from; a recipe with npm lines needs one.
	NpmRegistry string
	// TempDir holds the tree while it is built (default /var/tmp).
	TempDir string
	// Log receives debootstrap's and the tools' output.
	Log io.Writer
}

// Image is a built image: its archive (docker-archive format, which
// `docker load` and containerd's import read), its digest and its
// packages.
type Image struct {
	// Archive is the path of the archive file; the caller removes it.
	Archive string
	// Digest is the image's ID: the SHA-256 of its config.
	Digest string
	// Packages are what dpkg has installed, then what pip has, then the
	// npm packages, each sorted by name.
	Packages []images.Package
}

// Build builds r's image. A failure names the recipe line it comes from
// where there is one, and leaves nothing behind.
func Build(ctx context.Context, r images.Recipe, opts Options) (Image, error) {
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.TempDir == "" {
		opts.TempDir = "/var/tmp"
	}
	if err := checkIndex(ctx, r, opts.PipIndex); err != nil {
		return Image{}, err
	}
	npms, err := checkRegistry(ctx, r, opts.NpmRegistry)
	if err != nil {
		return Image{}, err
	}
	mirror := opts.Mirror
	if mirror == "" {
		var err error
		if mirror, err = AptMirror(r.Suite); err != nil {
			return Image{}, err
		}
	}
	work, err := os.MkdirTemp(opts.TempDir, "sandboxd-image-")
	if err != nil {
		return Image{}, err
	}
	defer os.RemoveAll(work)
	root := filepath.Join(work, "root")
	if err := debootstrap(ctx, r, root, mirror, opts.Log); err != nil {
		return Image{}, err
	}
	pkgs, err := installed(root)
	if err != nil {
		return Image{}, err
	}
	if err := checkPins(r, pkgs); err != nil {
		return Image{}, err
	}
	if err := apply(r, root); err != nil {
		return Image{}, err
	}
	if err := pipInstall(ctx, r, root, opts.PipIndex, opts.Log); err != nil {
		return Image{}, err
	}
	pips, err := pipInstalled(root)
	if err != nil {
		return Image{}, err
	}
	pkgs = append(pkgs, pips...)
	installedNpm, err := npmInstall(ctx, r, root, npms)
	if err != nil {
		return Image{}, err
	}
	pkgs = append(pkgs, installedNpm...)
	if err := normalise(ctx, root, opts.Log); err != nil {
		return Image{}, fmt.Errorf("normalise the tree: %w", err)
	}
	archive, err := os.CreateTemp(opts.TempDir, "sandboxd-image-*.tar")
	if err != nil {
		return Image{}, err
	}
	digest, err := writeArchive(archive, root, work, r)
	if cerr := archive.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(archive.Name())
		return Image{}, fmt.Errorf("write the image archive: %w", err)
	}
	return Image{Archive: archive.Name(), Digest: digest, Packages: pkgs}, nil
}

// missingDebs is how debootstrap names packages the mirror lacks.
var missingDebs = regexp.MustCompile(`Couldn't find these debs: (.*)`)

// debootstrap installs r's suite and packages (names only: pins are
// checked after) into root.
func debootstrap(ctx context.Context, r images.Recipe, root, mirror string, log io.Writer) error {
	var names []string
	for _, p := range r.Packages {
		name, _, _ := strings.Cut(p, "=")
		names = append(names, name)
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "debootstrap", "--variant=minbase", "--include="+strings.Join(names, ","), r.Suite, root, mirror)
	cmd.Stdout = io.MultiWriter(log, &out)
	cmd.Stderr = cmd.Stdout
	err := cmd.Run()
	if err == nil {
		return nil
	}
	if errors.Is(err, exec.ErrNotFound) {
		return errors.New("debootstrap is not installed (scripts/setup.sh installs it)")
	}
	if m := missingDebs.FindStringSubmatch(out.String()); m != nil {
		var where []string
		for _, name := range strings.Fields(m[1]) {
			where = append(where, fmt.Sprintf("%s (%s)", name, r.Where(name)))
		}
		return fmt.Errorf("the mirror %s has no package %s", mirror, strings.Join(where, ", "))
	}
	tail := out.String()
	if len(tail) > 2000 {
		tail = tail[len(tail)-2000:]
	}
	return fmt.Errorf("debootstrap %s from %s: %w\n%s", r.Suite, mirror, err, tail)
}

// checkPins refuses a build whose packages are not the versions the recipe
// pins.
func checkPins(r images.Recipe, pkgs []images.Package) error {
	var bad []string
	for _, spec := range r.Packages {
		name, version, pinned := strings.Cut(spec, "=")
		if !pinned {
			continue
		}
		i := slices.IndexFunc(pkgs, func(p images.Package) bool { return p.Name == name })
		if i < 0 || pkgs[i].Version != version {
			have := "none"
			if i >= 0 {
				have = pkgs[i].Version
			}
			bad = append(bad, fmt.Sprintf("%s (%s) is pinned to %s but the mirror gives %s", name, r.Where(name), version, have))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("recipe %s: %s", r.Name, strings.Join(bad, "; "))
	}
	return nil
}

// installed lists the packages dpkg installed in root.
func installed(root string) ([]images.Package, error) {
	f, err := os.Open(filepath.Join(root, "var/lib/dpkg/status"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var pkgs []images.Package
	var p images.Package
	ok := false
	flush := func() {
		if ok && p.Name != "" {
			pkgs = append(pkgs, p)
		}
		p, ok = images.Package{}, false
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			flush()
			continue
		}
		key, value, found := strings.Cut(line, ": ")
		if !found {
			continue
		}
		switch key {
		case "Package":
			p.Name = value
		case "Version":
			p.Version = value
		case "Architecture":
			p.Architecture = value
		case "Status":
			ok = value == "install ok installed"
		}
	}
	flush()
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].Name < pkgs[j].Name })
	return pkgs, sc.Err()
}

// apply adds what the recipe adds to the tree: the sandbox user, the
// folders sandboxd mounts over, the recipe's files, and its removals.
func apply(r images.Recipe, root string) error {
	// The sandbox user owns nothing but its working directory.
	for file, line := range map[string]string{
		"etc/passwd": "sandbox:x:1000:1000:sandbox:/workspace:/bin/bash\n",
		"etc/group":  "sandbox:x:1000:\n",
		"etc/shadow": "sandbox:!:::::::\n",
	} {
		f, err := os.OpenFile(filepath.Join(root, file), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, err = f.WriteString(line)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	// Files the recipe adds, root's and read-only for everyone else.
	for _, p := range slices.Sorted(maps.Keys(r.Files)) {
		dst := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, r.Files[p], 0o644); err != nil {
			return err
		}
		if err := os.Chmod(dst, 0o644); err != nil {
			return err
		}
	}
	for _, p := range r.Remove {
		if err := os.Remove(filepath.Join(root, p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("recipe %s: remove %s: %w", r.Name, p, err)
		}
	}
	for _, d := range []string{"workspace", "input", "code", "mnt"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chown(filepath.Join(root, "workspace"), 1000, 1000); err != nil {
		return err
	}
	return os.Chmod(filepath.Join(root, "tmp"), fs.ModePerm|fs.ModeSticky)
}

// goarch is the architecture images are built for: the host's, as
// debootstrap installs it.
func goarch() string { return goruntime.GOARCH }
