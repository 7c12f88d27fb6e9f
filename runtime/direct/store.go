package direct

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/moby/sys/atomicwriter"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/runtime"
)

// DefaultImageDir is where the images of the direct backend are kept, one
// folder per image, shared by the daemons of a host as Docker's and
// containerd's stores are.
const DefaultImageDir = "/var/lib/sandboxd/images"

// Store is a folder of images, each unpacked once, read-only to every
// container of it:
//
//	DIR/names.json       each image name (NAME:TAG) and the ID it names
//	DIR/HEX/config.json  the image's config, whose SHA-256 is its ID
//	DIR/HEX/rootfs/      its root file system
//
// An image is put in whole (unpacked beside, then renamed into place) and
// only after its config and layer are checked against their digests, so a
// folder HEX is always the image sha256:HEX.
type Store struct {
	dir string

	mu sync.Mutex
	// names is names.json as last read, and the file's identity then.
	names   map[string]string
	namesAt fs.FileInfo
	// configs are the configs read, by ID: an ID's config never changes.
	configs map[string]storedImage
}

// storedImage is what Image reads of one image.
type storedImage struct {
	labels  map[string]string
	env     []string
	volumes []string
}

// OpenStore opens, or makes, the store at dir.
func OpenStore(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	return &Store{dir: dir, configs: map[string]storedImage{}}, nil
}

// Dir is the store's folder.
func (s *Store) Dir() string { return s.dir }

// rootfs is the root file system of the image id.
func (s *Store) rootfs(id string) string {
	return filepath.Join(s.dir, strings.TrimPrefix(id, "sha256:"), "rootfs")
}

// Image resolves ref, a name or an ID, to the image in the store.
func (s *Store) Image(ref string) (runtime.Image, error) {
	id := ref
	if !strings.HasPrefix(ref, "sha256:") {
		key, err := nameKey(ref)
		if err != nil {
			return runtime.Image{}, err
		}
		names, err := s.readNames()
		if err != nil {
			return runtime.Image{}, err
		}
		if id = names[key]; id == "" {
			return runtime.Image{}, fmt.Errorf("image %s is not in the image store %s: %w", ref, s.dir, errdefs.ErrNotFound)
		}
	}
	img, err := s.config(id)
	if err != nil {
		return runtime.Image{}, err
	}
	return runtime.Image{ID: id, Ref: ref, Labels: maps.Clone(img.labels), Env: slices.Clone(img.env), Volumes: slices.Clone(img.volumes)}, nil
}

// Has says whether the store holds the image id.
func (s *Store) Has(id string) bool {
	_, err := s.config(id)
	return err == nil
}

// config reads the config of the image id, once.
func (s *Store) config(id string) (storedImage, error) {
	hexID, ok := strings.CutPrefix(id, "sha256:")
	if !ok || len(hexID) != 64 || strings.Trim(hexID, "0123456789abcdef") != "" {
		return storedImage{}, fmt.Errorf("image %q: not an image ID (sha256:HEX): %w", id, errdefs.ErrInvalidArgument)
	}
	s.mu.Lock()
	img, ok := s.configs[id]
	s.mu.Unlock()
	if ok {
		return img, nil
	}
	b, err := os.ReadFile(filepath.Join(s.dir, hexID, "config.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return storedImage{}, fmt.Errorf("image %s is not in the image store %s: %w", id, s.dir, errdefs.ErrNotFound)
	}
	if err != nil {
		return storedImage{}, err
	}
	var cfg ocispec.Image
	if err := json.Unmarshal(b, &cfg); err != nil {
		return storedImage{}, fmt.Errorf("image %s: its config: %w", id, err)
	}
	img = storedImage{labels: cfg.Config.Labels, env: cfg.Config.Env}
	for v := range cfg.Config.Volumes {
		img.volumes = append(img.volumes, v)
	}
	sort.Strings(img.volumes)
	s.mu.Lock()
	s.configs[id] = img
	s.mu.Unlock()
	return img, nil
}

// nameKey is the name under which ref is kept: familiar, with its tag
// (sandboxd/python:latest for sandboxd/python).
func nameKey(ref string) (string, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", fmt.Errorf("image %q: %w: %w", ref, err, errdefs.ErrInvalidArgument)
	}
	return reference.FamiliarString(reference.TagNameOnly(named)), nil
}

// readNames reads names.json when it changed since it was last read.
func (s *Store) readNames() (map[string]string, error) {
	file := filepath.Join(s.dir, "names.json")
	st, err := os.Stat(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.namesAt != nil && os.SameFile(st, s.namesAt) && st.ModTime().Equal(s.namesAt.ModTime()) && st.Size() == s.namesAt.Size() {
		return s.names, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	names := map[string]string{}
	if err := json.Unmarshal(b, &names); err != nil {
		return nil, fmt.Errorf("image store: %s: %w", file, err)
	}
	s.names, s.namesAt = names, st
	return names, nil
}

// Load puts the image of a docker-archive (what sandboxd's image builder
// and `docker save` write: a config, one layer, a manifest naming them)
// in the store, under the names its manifest gives, and returns its ID.
// The config must hash to the ID the archive names it by and the layer to
// the config's diff ID; an image of more than one layer is refused. An
// image the store has already is only named again.
func (s *Store) Load(archive io.Reader) (string, error) {
	work, err := os.MkdirTemp(s.dir, ".load-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	var (
		manifest []struct {
			Config   string
			RepoTags []string
			Layers   []string
		}
		configs   = map[string][]byte{}
		layerName string
		layerSum  string
	)
	rootfs := filepath.Join(work, "rootfs")
	tr := tar.NewReader(archive)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", fmt.Errorf("image archive: %w", err)
		}
		name := path.Clean(hdr.Name)
		switch {
		case hdr.Typeflag != tar.TypeReg:
		case name == "manifest.json":
			if err := json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&manifest); err != nil {
				return "", fmt.Errorf("image archive: manifest.json: %w", err)
			}
		case strings.HasSuffix(name, ".json") && !strings.Contains(name, "/"):
			b, err := io.ReadAll(io.LimitReader(tr, 1<<20))
			if err != nil {
				return "", err
			}
			configs[name] = b
		case strings.HasSuffix(name, "/layer.tar") || strings.HasPrefix(name, "blobs/"):
			if layerName != "" {
				return "", fmt.Errorf("image archive: more than one layer (%s, %s): the direct backend's store takes one-layer images, as sandboxd's builder makes them: %w", layerName, name, errdefs.ErrInvalidArgument)
			}
			h := sha256.New()
			if err := unpack(io.TeeReader(tr, h), rootfs); err != nil {
				return "", fmt.Errorf("image archive: layer %s: %w", name, err)
			}
			// Read what the layer's tar leaves after its end, to hash it all.
			if _, err := io.Copy(h, tr); err != nil {
				return "", err
			}
			layerName, layerSum = name, "sha256:"+hex.EncodeToString(h.Sum(nil))
		}
	}
	if len(manifest) != 1 || len(manifest[0].Layers) != 1 || path.Clean(manifest[0].Layers[0]) != layerName {
		return "", fmt.Errorf("image archive: want a manifest of one image of one layer, the layer in the archive: %w", errdefs.ErrInvalidArgument)
	}
	config, ok := configs[path.Clean(manifest[0].Config)]
	if !ok {
		return "", fmt.Errorf("image archive: the config %s its manifest names is missing: %w", manifest[0].Config, errdefs.ErrInvalidArgument)
	}
	sum := sha256.Sum256(config)
	id := "sha256:" + hex.EncodeToString(sum[:])
	if want := strings.TrimSuffix(path.Base(manifest[0].Config), ".json"); want != hex.EncodeToString(sum[:]) {
		return "", fmt.Errorf("image archive: the config %s hashes to %s: %w", manifest[0].Config, id, errdefs.ErrDataLoss)
	}
	var cfg ocispec.Image
	if err := json.Unmarshal(config, &cfg); err != nil {
		return "", fmt.Errorf("image archive: its config: %w", err)
	}
	if len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0].String() != layerSum {
		return "", fmt.Errorf("image archive: the layer hashes to %s, not the config's diff ID %v: %w", layerSum, cfg.RootFS.DiffIDs, errdefs.ErrDataLoss)
	}
	unlock, err := s.lock()
	if err != nil {
		return "", err
	}
	defer unlock()
	final := filepath.Join(s.dir, strings.TrimPrefix(id, "sha256:"))
	if _, err := os.Stat(filepath.Join(final, "config.json")); err != nil {
		if err := os.WriteFile(filepath.Join(work, "config.json"), config, 0o644); err != nil {
			return "", err
		}
		os.RemoveAll(final) // a load cut short before its rename left nothing here; a stray folder goes
		if err := os.Rename(work, final); err != nil {
			return "", err
		}
		if err := os.MkdirAll(work, 0o700); err != nil { // for the deferred RemoveAll
			return "", err
		}
	}
	return id, s.name(id, manifest[0].RepoTags)
}

// Name points each of names at the image id, which the store holds.
func (s *Store) Name(id string, names ...string) error {
	if !s.Has(id) {
		return fmt.Errorf("image %s is not in the image store %s: %w", id, s.dir, errdefs.ErrNotFound)
	}
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	return s.name(id, names)
}

// Unname removes name, and the image it named when no other name names
// it and it is not in use: no container's root file system lies on it.
func (s *Store) Unname(name string) error {
	key, err := nameKey(name)
	if err != nil {
		return err
	}
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	names, err := s.loadNames()
	if err != nil {
		return err
	}
	id, ok := names[key]
	if !ok {
		return nil
	}
	delete(names, key)
	if err := s.writeNames(names); err != nil {
		return err
	}
	for _, other := range names {
		if other == id {
			return nil
		}
	}
	return os.RemoveAll(filepath.Join(s.dir, strings.TrimPrefix(id, "sha256:")))
}

// loadNames reads names.json, which may not exist yet.
func (s *Store) loadNames() (map[string]string, error) {
	file := filepath.Join(s.dir, "names.json")
	names := map[string]string{}
	if b, err := os.ReadFile(file); err == nil {
		if err := json.Unmarshal(b, &names); err != nil {
			return nil, fmt.Errorf("image store: %s: %w", file, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return names, nil
}

func (s *Store) writeNames(names map[string]string) error {
	b, err := json.MarshalIndent(names, "", "  ")
	if err != nil {
		return err
	}
	return atomicwriter.WriteFile(filepath.Join(s.dir, "names.json"), append(b, '\n'), 0o644)
}

// name points each of tags at id in names.json; the caller holds the lock.
func (s *Store) name(id string, tags []string) error {
	names, err := s.loadNames()
	if err != nil {
		return err
	}
	for _, tag := range tags {
		key, err := nameKey(tag)
		if err != nil {
			return err
		}
		names[key] = id
	}
	return s.writeNames(names)
}

// lock takes the store's lock, which loads hold while they put an image
// in and name it: two builds load at once.
func (s *Store) lock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(s.dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// LoadImage puts the image archive at path in the store at dir (see
// Store.Load): how `sandboxd image build` hands its images to this
// backend.
func LoadImage(dir, path string) (string, error) {
	s, err := OpenStore(dir)
	if err != nil {
		return "", err
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return s.Load(f)
}

// HasImage says whether the store at dir holds the image id.
func HasImage(dir, id string) bool {
	return (&Store{dir: dir, configs: map[string]storedImage{}}).Has(id)
}
