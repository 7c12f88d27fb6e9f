package builder

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sandboxd/sandboxd/images"
)

// epoch is every file's time, and the image's: builds of the same
// packages on different days give the same bytes.
var epoch = time.Unix(0, 0).UTC()

// writeArchive writes the image of the tree at root to w as a
// docker-archive: its layer (written first to a file in work, to hash it),
// its config, and a manifest naming it r.Name:latest. It returns the
// image's digest.
func writeArchive(w io.Writer, root, work string, r images.Recipe) (string, error) {
	layerPath := filepath.Join(work, "layer.tar")
	lf, err := os.Create(layerPath)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	err = writeLayer(io.MultiWriter(lf, h), root)
	if cerr := lf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	diffID := digest.NewDigestFromBytes(digest.SHA256, h.Sum(nil))
	config, err := json.Marshal(imageConfig(r, diffID))
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(config)
	id := hex.EncodeToString(sum[:])
	layerName := diffID.Encoded() + "/layer.tar"
	manifest, err := json.Marshal([]map[string]any{{
		"Config": id + ".json", "RepoTags": []string{r.Name + ":latest"}, "Layers": []string{layerName},
	}})
	if err != nil {
		return "", err
	}
	tw := tar.NewWriter(w)
	file := func(name string, size int64, body io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := io.Copy(tw, body)
		return err
	}
	if err := file(id+".json", int64(len(config)), strings.NewReader(string(config))); err != nil {
		return "", err
	}
	st, err := os.Stat(layerPath)
	if err != nil {
		return "", err
	}
	layer, err := os.Open(layerPath)
	if err != nil {
		return "", err
	}
	defer layer.Close()
	if err := file(layerName, st.Size(), layer); err != nil {
		return "", err
	}
	if err := file("manifest.json", int64(len(manifest)), strings.NewReader(string(manifest))); err != nil {
		return "", err
	}
	return "sha256:" + id, tw.Close()
}

// imageConfig is the image's config: who runs, where, with which
// environment, and its labels (the short name and the recipe's digest).
func imageConfig(r images.Recipe, diffID digest.Digest) ocispec.Image {
	created := epoch
	env := append([]string{"PATH=/usr/local/bin:/usr/bin:/bin"}, r.Env...)
	return ocispec.Image{
		Created:  &created,
		Platform: ocispec.Platform{Architecture: goarch(), OS: "linux"},
		Config: ocispec.ImageConfig{
			User: "1000:1000", WorkingDir: "/workspace", Env: env,
			Labels: map[string]string{images.LabelImage: strings.TrimPrefix(r.Name, images.Prefix), images.LabelRecipe: r.Digest},
		},
		RootFS:  ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{diffID}},
		History: []ocispec.History{{Created: &created, CreatedBy: "sandboxd image build " + r.Name}},
	}
}

// writeLayer writes the tree as a tar in name order, with one time, no
// user or group names, and hard links as links.
func writeLayer(w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	links := map[[2]uint64]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode()&fs.ModeSocket != 0 {
			return nil
		}
		target := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if target, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, target)
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		hdr.Name = rel
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = int(st.Uid), int(st.Gid), "", ""
		hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = epoch, time.Time{}, time.Time{}
		hdr.Format = tar.FormatPAX
		if info.Mode().IsRegular() && st.Nlink > 1 {
			key := [2]uint64{uint64(st.Dev), st.Ino}
			if first, ok := links[key]; ok {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
			} else {
				links[key] = rel
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
