package builder

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/images"
)

// A recipe's npm lines are installed without npm, as a lock file would
// have them: each pinned package's tarball, from the registry the operator
// names, checked against the registry's integrity digest, unpacked into
// its own folder of images.NpmDir. Every dependency a package declares
// must be on an npm line too, so that what is installed is exactly what
// the recipe names; the registry is asked for all of it before
// debootstrap runs.

// npmPackage is a pinned npm package as the registry describes it.
type npmPackage struct {
	name, version string
	tarball       string
	integrity     string // "sha512-BASE64", or "sha1-HEX" from the shasum
}

// npmVersion is what a registry's packument says of one version.
type npmVersion struct {
	Dependencies map[string]string `json:"dependencies"`
	Dist         struct {
		Tarball   string `json:"tarball"`
		Integrity string `json:"integrity"`
		Shasum    string `json:"shasum"`
	} `json:"dist"`
}

// checkRegistry asks registry for each of r's npm packages and checks that
// the recipe names every dependency they declare.
func checkRegistry(ctx context.Context, r images.Recipe, registry string) ([]npmPackage, error) {
	if len(r.Npm) == 0 {
		return nil, nil
	}
	first, _, _ := images.CutNpm(r.Npm[0])
	if registry == "" {
		return nil, fmt.Errorf("recipe %s: its npm lines (%s) need a registry to install from: give --npm-registry URL (the operator's npm mirror)", r.Name, r.WhereNpm(first))
	}
	base, err := url.Parse(registry)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") {
		return nil, fmt.Errorf("--npm-registry %q is not an http or https URL", registry)
	}
	named := map[string]bool{}
	for _, spec := range r.Npm {
		name, _, _ := images.CutNpm(spec)
		named[name] = true
	}
	var pkgs []npmPackage
	var bad []string
	for _, spec := range r.Npm {
		name, version, _ := images.CutNpm(spec)
		v, err := packument(ctx, base, name, version)
		switch {
		case errors.Is(err, errNoVersion):
			bad = append(bad, fmt.Sprintf("the registry %s has no %s (%s)", registry, spec, r.WhereNpm(name)))
			continue
		case err != nil:
			return nil, fmt.Errorf("recipe %s: the registry %s: %s: %w", r.Name, registry, name, err)
		}
		for _, dep := range slices.Sorted(maps.Keys(v.Dependencies)) {
			if !named[dep] {
				bad = append(bad, fmt.Sprintf("%s (%s) depends on %s %s, which no npm line names", spec, r.WhereNpm(name), dep, v.Dependencies[dep]))
			}
		}
		p := npmPackage{name: name, version: version, tarball: v.Dist.Tarball, integrity: v.Dist.Integrity}
		if p.integrity == "" && v.Dist.Shasum != "" {
			p.integrity = "sha1-" + v.Dist.Shasum
		}
		if p.tarball == "" || p.integrity == "" {
			bad = append(bad, fmt.Sprintf("the registry %s names no tarball with a digest for %s", registry, spec))
			continue
		}
		pkgs = append(pkgs, p)
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("recipe %s: %s", r.Name, strings.Join(bad, "; "))
	}
	return pkgs, nil
}

var errNoVersion = errors.New("no such version")

// packument is what the registry says of version of package name.
func packument(ctx context.Context, base *url.URL, name, version string) (npmVersion, error) {
	// A scoped name is one path segment: @scope%2fname.
	u := strings.TrimSuffix(base.String(), "/") + "/" + strings.Replace(name, "/", "%2f", 1)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return npmVersion{}, err
	}
	req.Header.Set("Accept", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return npmVersion{}, err
	}
	defer res.Body.Close()
	switch {
	case res.StatusCode == http.StatusNotFound:
		return npmVersion{}, errNoVersion
	case res.StatusCode != http.StatusOK:
		return npmVersion{}, fmt.Errorf("GET %s: %s", u, res.Status)
	}
	var doc struct {
		Versions map[string]npmVersion `json:"versions"`
	}
	if err := json.NewDecoder(io.LimitReader(res.Body, 64<<20)).Decode(&doc); err != nil {
		return npmVersion{}, fmt.Errorf("GET %s: %w", u, err)
	}
	v, ok := doc.Versions[version]
	if !ok {
		return npmVersion{}, errNoVersion
	}
	return v, nil
}

// npmInstall unpacks pkgs into root's images.NpmDir, each checked
// against its digest, and lists them.
func npmInstall(ctx context.Context, r images.Recipe, root string, pkgs []npmPackage) ([]images.Package, error) {
	var out []images.Package
	for _, p := range pkgs {
		if err := npmUnpack(ctx, p, filepath.Join(root, images.NpmDir, p.name)); err != nil {
			return nil, fmt.Errorf("recipe %s: npm %s@%s (%s): %w", r.Name, p.name, p.version, r.WhereNpm(p.name), err)
		}
		out = append(out, images.Package{Name: p.name, Version: p.version, Type: images.TypeNpm})
	}
	slices.SortFunc(out, func(a, b images.Package) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// maxTarball bounds an npm package's tarball.
const maxTarball = 256 << 20

// npmUnpack downloads p's tarball, checks its digest, and unpacks its
// package folder into dir.
func npmUnpack(ctx context.Context, p npmPackage, dir string) error {
	algo, want, _ := strings.Cut(p.integrity, "-")
	var h hash.Hash
	var decode func(string) ([]byte, error)
	switch algo {
	case "sha512":
		h, decode = sha512.New(), base64.StdEncoding.DecodeString
	case "sha1":
		h, decode = sha1.New(), hex.DecodeString
	default:
		return fmt.Errorf("the registry's digest %q is of no algorithm sandboxd checks (sha512, sha1)", p.integrity)
	}
	wantSum, err := decode(want)
	if err != nil {
		return fmt.Errorf("the registry's digest %q: %w", p.integrity, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.tarball, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", p.tarball, res.Status)
	}
	body, err := io.ReadAll(io.LimitReader(io.TeeReader(res.Body, h), maxTarball+1))
	if err != nil {
		return err
	}
	if len(body) > maxTarball {
		return fmt.Errorf("%s is larger than %d MiB", p.tarball, maxTarball>>20)
	}
	if got := h.Sum(nil); string(got) != string(wantSum) {
		return fmt.Errorf("%s does not match the registry's digest %s", p.tarball, p.integrity)
	}
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("%s is there already", dir)
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	for {
		hd, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		// Entries are package/PATH (some registries use another first
		// folder): the first folder is dropped.
		_, rel, ok := strings.Cut(path.Clean(strings.TrimPrefix(hd.Name, "./")), "/")
		if !ok || rel == "" {
			continue
		}
		if !filepath.IsLocal(rel) {
			return fmt.Errorf("the tarball's entry %q leaves the package's folder", hd.Name)
		}
		dst := filepath.Join(dir, rel)
		switch hd.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			mode := os.FileMode(0o644)
			if hd.Mode&0o111 != 0 {
				mode = 0o755
			}
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, io.LimitReader(tr, maxTarball))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			// Links and devices are not what a package ships: left out.
		}
	}
}
