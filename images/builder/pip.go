package builder

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/sandboxd/sandboxd/images"
)

// A recipe's pip lines are installed with the image's own pip, as root,
// from the index the operator names (a PEP 503 simple index: their
// mirror), into /usr/local, after the Debian packages and before the
// tree is normalised. Each line pins a version; the index is asked for
// every one before debootstrap runs, so that a package it lacks fails the
// build in seconds and names its line.

// checkIndex asks index for each of r's pinned packages.
func checkIndex(ctx context.Context, r images.Recipe, index string) error {
	if len(r.Pip) == 0 {
		return nil
	}
	if index == "" {
		return fmt.Errorf("recipe %s: its pip lines (%s) need an index to install from: give --pip-index URL (a PEP 503 simple index, the operator's mirror)",
			r.Name, r.WherePip(pipName(r.Pip[0])))
	}
	base, err := url.Parse(index)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") {
		return fmt.Errorf("--pip-index %q is not an http or https URL", index)
	}
	var bad []string
	for _, spec := range r.Pip {
		name, version, _ := strings.Cut(spec, "==")
		files, err := indexFiles(ctx, base, name)
		if err != nil {
			return fmt.Errorf("recipe %s: the index %s: %w", r.Name, index, err)
		}
		if files == nil {
			bad = append(bad, fmt.Sprintf("the index %s has no package %s (%s)", index, name, r.WherePip(name)))
			continue
		}
		if !hasVersion(files, name, version) {
			bad = append(bad, fmt.Sprintf("the index %s has no %s (%s)", index, spec, r.WherePip(name)))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("recipe %s: %s", r.Name, strings.Join(bad, "; "))
	}
	return nil
}

func pipName(spec string) string {
	name, _, _ := strings.Cut(spec, "==")
	return name
}

// anchor is a file link of a simple index's project page.
var anchor = regexp.MustCompile(`(?i)<a\s[^>]*>([^<]+)</a>`)

// indexFiles are the file names the index lists for a project, or nil
// when it has no such project.
func indexFiles(ctx context.Context, base *url.URL, name string) ([]string, error) {
	page := base.JoinPath(images.PipName(name) + "/")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, page.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/html")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	switch {
	case res.StatusCode == http.StatusNotFound:
		return nil, nil
	case res.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("GET %s: %s", page, res.Status)
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	files := []string{}
	for _, m := range anchor.FindAllSubmatch(body, -1) {
		files = append(files, strings.TrimSpace(string(m[1])))
	}
	return files, nil
}

// hasVersion reports whether one of files is a wheel or source archive
// of name at version: NAME-VERSION-... .whl or NAME-VERSION.tar.gz (.zip),
// NAME written in any of the spellings indexes take for one.
func hasVersion(files []string, name, version string) bool {
	version = strings.ToLower(version)
	for _, f := range files {
		f = strings.ToLower(f)
		for i := strings.IndexByte(f, '-'); i > 0; i = nextDash(f, i) {
			rest, ok := strings.CutPrefix(f[i+1:], version)
			if ok && images.PipName(f[:i]) == images.PipName(name) &&
				(strings.HasPrefix(rest, "-") || strings.HasPrefix(rest, ".tar.") || rest == ".zip") {
				return true
			}
		}
	}
	return false
}

// nextDash is the index of the first - in f after i, or -1.
func nextDash(f string, i int) int {
	j := strings.IndexByte(f[i+1:], '-')
	if j < 0 {
		return -1
	}
	return i + 1 + j
}

// pipInstall installs r's pip lines into root with root's own pip, which
// installs root's into /usr/local (Debian's scheme; --prefix /usr/local
// would make it /usr/local/local).
func pipInstall(ctx context.Context, r images.Recipe, root, index string, log io.Writer) error {
	if len(r.Pip) == 0 {
		return nil
	}
	if _, err := os.Stat(filepath.Join(root, "usr/lib/python3/dist-packages/pip")); err != nil {
		return fmt.Errorf("recipe %s: its pip lines (%s) need pip in the image: add python3-pip to its packages", r.Name, r.WherePip(pipName(r.Pip[0])))
	}
	args := append([]string{root, "/usr/bin/python3", "-m", "pip", "install", "--no-cache-dir", "--no-input", "--disable-pip-version-check",
		"--no-compile", "--break-system-packages", "--index-url", index}, r.Pip...)
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "chroot", args...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/root", "LC_ALL=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1", "SOURCE_DATE_EPOCH=0"}
	cmd.Stdout = io.MultiWriter(log, &out)
	cmd.Stderr = cmd.Stdout
	if err := cmd.Run(); err != nil {
		tail := out.String()
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return fmt.Errorf("recipe %s: pip install %s: %w\n%s", r.Name, strings.Join(r.Pip, " "), err, tail)
	}
	return nil
}

// pipInstalled lists the Python packages pip installed into root's
// /usr/local, sorted by name.
func pipInstalled(root string) ([]images.Package, error) {
	metas, err := filepath.Glob(filepath.Join(root, "usr/local/lib/python3*/dist-packages/*.dist-info/METADATA"))
	if err != nil {
		return nil, err
	}
	var pkgs []images.Package
	for _, m := range metas {
		p, err := readMetadata(m)
		if err != nil {
			return nil, err
		}
		pkgs = append(pkgs, p)
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].Name < pkgs[j].Name })
	return pkgs, nil
}

// readMetadata reads a distribution's name and version from its METADATA.
func readMetadata(path string) (images.Package, error) {
	f, err := os.Open(path)
	if err != nil {
		return images.Package{}, err
	}
	defer f.Close()
	p := images.Package{Type: images.TypePyPI}
	sc := bufio.NewScanner(f)
	for sc.Scan() && sc.Text() != "" {
		if v, ok := strings.CutPrefix(sc.Text(), "Name: "); ok {
			p.Name = v
		} else if v, ok := strings.CutPrefix(sc.Text(), "Version: "); ok {
			p.Version = v
		}
	}
	if p.Name == "" || p.Version == "" {
		return p, fmt.Errorf("%s names no Name and Version", path)
	}
	return p, sc.Err()
}
