package direct

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// entry is one entry of a test tar.
type entry struct {
	hdr  tar.Header
	body string
}

func tarOf(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := e.hdr
		h.Uid, h.Gid = os.Getuid(), os.Getgid()
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.body))
	}
	tw.Close()
	return b.Bytes()
}

func dir(name string) entry {
	return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755}}
}
func file(name, body string) entry {
	return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644}, body: body}
}

// archiveOf is a docker-archive of one image of layer, named tags, with
// the config's diff ID diffID ("" for the layer's true one).
func archiveOf(t *testing.T, layer []byte, diffID string, tags ...string) ([]byte, string) {
	t.Helper()
	if diffID == "" {
		diffID = digest.FromBytes(layer).String()
	}
	cfg, _ := json.Marshal(ocispec.Image{
		Config: ocispec.ImageConfig{Env: []string{"PATH=/bin"}, Labels: map[string]string{"io.sandboxd.image": "test"}},
		RootFS: ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{digest.Digest(diffID)}},
	})
	sum := sha256.Sum256(cfg)
	id := hex.EncodeToString(sum[:])
	manifest, _ := json.Marshal([]map[string]any{{"Config": id + ".json", "RepoTags": tags, "Layers": []string{"l/layer.tar"}}})
	return tarOf(t, file(id+".json", string(cfg)), file("l/layer.tar", string(layer)), file("manifest.json", string(manifest))), "sha256:" + id
}

func TestStoreLoadsNamesAndResolves(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	layer := tarOf(t, dir("bin/"), file("bin/hello", "#!/bin/sh\n"), entry{hdr: tar.Header{Name: "bin/sh", Typeflag: tar.TypeSymlink, Linkname: "hello"}},
		entry{hdr: tar.Header{Name: "bin/again", Typeflag: tar.TypeLink, Linkname: "bin/hello"}})
	archive, want := archiveOf(t, layer, "", "sandboxd/test:latest")
	id, err := s.Load(bytes.NewReader(archive))
	if err != nil || id != want {
		t.Fatalf("Load() = %s, %v; want %s", id, err, want)
	}
	for _, ref := range []string{"sandboxd/test", "sandboxd/test:latest", "docker.io/sandboxd/test:latest", want} {
		img, err := s.Image(ref)
		if err != nil || img.ID != want || img.Labels["io.sandboxd.image"] != "test" || len(img.Env) != 1 {
			t.Errorf("Image(%s) = %+v, %v", ref, img, err)
		}
	}
	root := s.rootfs(id)
	if b, err := os.ReadFile(filepath.Join(root, "bin/again")); err != nil || string(b) != "#!/bin/sh\n" {
		t.Errorf("the hard link reads %q, %v", b, err)
	}
	if target, err := os.Readlink(filepath.Join(root, "bin/sh")); err != nil || target != "hello" {
		t.Errorf("the symbolic link is %q, %v", target, err)
	}
	if _, err := s.Image("sandboxd/other"); !errdefs.IsNotFound(err) {
		t.Errorf("Image() of a name the store lacks = %v, want not found", err)
	}
	// A second load names again, and another name goes with Unname alone.
	if err := s.Name(id, "sandboxd/alias"); err != nil {
		t.Fatal(err)
	}
	if err := s.Unname("sandboxd/alias"); err != nil {
		t.Fatal(err)
	}
	if !s.Has(id) {
		t.Fatal("Unname of one of two names removed the image")
	}
	if err := s.Unname("sandboxd/test"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("the image's folder is left after its last name went: %v", err)
	}
}

// TestStoreRefusesWhatDoesNotHash refuses an archive whose layer is not
// the one its config names, or that has two layers, and keeps nothing.
func TestStoreRefusesWhatDoesNotHash(t *testing.T) {
	layer := tarOf(t, file("a", "x"))
	wrong, _ := archiveOf(t, layer, digest.FromString("other").String(), "sandboxd/test:latest")
	two := tarOf(t, file("manifest.json", "[]"), file("l/layer.tar", string(layer)), file("m/layer.tar", string(layer)))
	for name, archive := range map[string][]byte{"wrong diff ID": wrong, "two layers": two} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s, _ := OpenStore(dir)
			if _, err := s.Load(bytes.NewReader(archive)); err == nil {
				t.Fatal("Load() succeeded")
			}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if e.Name() != ".lock" {
					t.Errorf("left in the store: %s", e.Name())
				}
			}
		})
	}
}

// TestUnpackStaysInside refuses names that climb out of the root or pass
// through a symbolic link, and whiteouts.
func TestUnpackStaysInside(t *testing.T) {
	outside := t.TempDir()
	for name, layer := range map[string][]byte{
		"through a link": tarOf(t, entry{hdr: tar.Header{Name: "out", Typeflag: tar.TypeSymlink, Linkname: outside}}, file("out/escaped", "x")),
		"a hard link out": tarOf(t, entry{hdr: tar.Header{Name: "out", Typeflag: tar.TypeSymlink, Linkname: outside}},
			entry{hdr: tar.Header{Name: "link", Typeflag: tar.TypeLink, Linkname: "out/secret"}}),
		"a whiteout":          tarOf(t, file(".wh.gone", "")),
		"under no folder yet": tarOf(t, file("missing/file", "x")),
	} {
		t.Run(name, func(t *testing.T) {
			os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600)
			if err := unpack(bytes.NewReader(layer), filepath.Join(t.TempDir(), "root")); err == nil {
				t.Fatal("unpack() succeeded")
			}
			if _, err := os.Stat(filepath.Join(outside, "escaped")); err == nil {
				t.Fatal("a file was written outside the root")
			}
		})
	}
	// ../ in a name is cleaned to the root, not followed.
	root := filepath.Join(t.TempDir(), "root")
	if err := unpack(bytes.NewReader(tarOf(t, file("../../climbed", "x"))), root); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "climbed")); err != nil || !strings.HasPrefix(string(b), "x") {
		t.Errorf("../../climbed went to %q, %v; want the root", b, err)
	}
}
