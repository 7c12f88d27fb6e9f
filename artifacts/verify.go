package artifacts

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/containerd/errdefs"
	"github.com/klauspost/compress/zstd"
)

// ReadLimits bound what reading an untrusted bundle may cost.
type ReadLimits struct {
	// UncompressedBytes caps the decompressed tar: past it the bundle is
	// refused, so that a small decompression bomb costs little.
	UncompressedBytes int64
	// Entries caps the number of tar entries.
	Entries int
	// NameBytes caps the length of an entry's name.
	NameBytes int
	// Depth caps the number of folders in an entry's name.
	Depth int
	// ManifestBytes caps the manifest's size.
	ManifestBytes int64
	// DecoderMemory caps the zstd decoder's memory and window.
	DecoderMemory uint64
}

// DefaultReadLimits fit every bundle a daemon with default settings writes.
func DefaultReadLimits() ReadLimits {
	return ReadLimits{
		UncompressedBytes: 512 << 20,
		Entries:           20000,
		NameBytes:         1024,
		Depth:             40,
		ManifestBytes:     16 << 20,
		DecoderMemory:     64 << 20,
	}
}

// EncoderWindow is the zstd window bundles are written with; it stays well
// inside the decoder's limit.
const EncoderWindow = 4 << 20

// Bundle is a verified bundle.
type Bundle struct {
	// Digest is the SHA-256 of the canonical tar.
	Digest   string
	Manifest Manifest
	// UncompressedBytes is the tar's size.
	UncompressedBytes int64
}

// ErrInvalid classifies every refusal: the bundle is altered, truncated,
// not canonical or hostile.
var ErrInvalid = errdefs.ErrDataLoss

func invalid(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrInvalid)
}

// Verify reads a compressed bundle from r and checks all of it: the zstd
// stream, every tar header against the canonical form and the hostile
// shapes (traversal, links, devices, duplicates, huge names, depth, entry
// count), every entry's size and SHA-256 against the manifest, the
// manifest's own consistency, nothing after the end of the tar, and, when
// want is not empty, the digest of the whole. It writes nothing. visit, when
// not nil, sees each file's content as it streams past, before it has been
// checked: keep what it gathers only if Verify then succeeds.
func Verify(r io.Reader, want string, lim ReadLimits, visit func(path string, content io.Reader) error) (*Bundle, error) {
	src := &sourceReader{r: r}
	dec, err := zstd.NewReader(src,
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxMemory(lim.DecoderMemory),
		zstd.WithDecoderMaxWindow(lim.DecoderMemory),
		zstd.WithDecoderLowmem(true))
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	capped := &capReader{r: dec, limit: lim.UncompressedBytes, left: lim.UncompressedBytes}
	whole := sha256.New()
	tee := io.TeeReader(capped, whole)
	tr := tar.NewReader(tee)

	type seen struct {
		size int64
		sum  string
		exec bool
	}
	files := map[string]seen{}
	dirs := map[string]bool{}
	var manifestBytes []byte
	var last string
	count := 0
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, src.classify("tar", err)
		}
		count++
		if count > lim.Entries {
			return nil, invalid("more than %d entries", lim.Entries)
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		if err := checkHeader(hdr, name, lim); err != nil {
			return nil, err
		}
		if name <= last {
			return nil, invalid("entry %q is out of order or given twice", name)
		}
		last = name
		for _, dir := range parents(name) {
			if !dirs[dir] {
				return nil, invalid("entry %q comes without its folder %q", name, dir)
			}
		}
		if hdr.Typeflag == tar.TypeDir {
			dirs[name] = true
			continue
		}
		if name == ManifestPath {
			if hdr.Size > lim.ManifestBytes {
				return nil, invalid("manifest is %d bytes, above the limit of %d", hdr.Size, lim.ManifestBytes)
			}
			if manifestBytes, err = io.ReadAll(tr); err != nil {
				return nil, src.classify("manifest", err)
			}
			continue
		}
		h := &countingHash{Hash: sha256.New()}
		content := io.TeeReader(tr, h)
		if visit != nil {
			if err := visit(name, content); err != nil {
				return nil, err
			}
		}
		if _, err := io.Copy(io.Discard, content); err != nil {
			return nil, src.classify("entry "+name, err)
		}
		if h.n != hdr.Size {
			return nil, invalid("entry %q is truncated", name)
		}
		files[name] = seen{size: hdr.Size, sum: hex.EncodeToString(h.Sum(nil)), exec: hdr.Mode == 0o755}
	}
	// Nothing may follow the end of the tar.
	if n, err := io.Copy(io.Discard, tee); err != nil {
		return nil, src.classify("after the tar", err)
	} else if n > 0 {
		return nil, invalid("%d bytes follow the end of the tar", n)
	}
	if manifestBytes == nil {
		return nil, invalid("no %s", ManifestPath)
	}
	m, err := parseManifest(manifestBytes)
	if err != nil {
		return nil, err
	}
	listed := map[string]bool{}
	for _, e := range m.Reproducible.Entries {
		got, ok := files[e.Path]
		switch {
		case listed[e.Path]:
			return nil, invalid("manifest lists %q twice", e.Path)
		case !ok:
			return nil, invalid("manifest lists %q, which the tar lacks", e.Path)
		case got.size != e.Size:
			return nil, invalid("entry %q is %d bytes, the manifest says %d", e.Path, got.size, e.Size)
		case got.sum != e.SHA256:
			return nil, invalid("entry %q does not match its SHA-256 in the manifest", e.Path)
		case got.exec != e.Executable:
			return nil, invalid("entry %q has another mode than the manifest says", e.Path)
		}
		listed[e.Path] = true
	}
	for p := range files {
		if !listed[p] {
			return nil, invalid("entry %q is not in the manifest", p)
		}
	}
	digest := Digest(whole.Sum(nil))
	if want != "" && digest != want {
		return nil, invalid("the bundle's digest is %s, not %s", digest, want)
	}
	return &Bundle{Digest: digest, Manifest: *m, UncompressedBytes: lim.UncompressedBytes - capped.left}, nil
}

// parseManifest decodes a manifest strictly and checks its reproducible
// digest.
func parseManifest(b []byte) (*Manifest, error) {
	var raw struct {
		Reproducible json.RawMessage `json:"reproducible"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, invalid("manifest: %v", err)
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, invalid("manifest: %v", err)
	}
	if m.Format != Format {
		return nil, invalid("manifest format %q is not %q", m.Format, Format)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw.Reproducible); err != nil {
		return nil, invalid("manifest: %v", err)
	}
	sum := sha256.Sum256(compact.Bytes())
	if Digest(sum[:]) != m.Run.ReproducibleDigest {
		return nil, invalid("the manifest's reproducible section does not match its digest")
	}
	return &m, nil
}

// checkHeader refuses every header a canonical bundle does not have.
func checkHeader(hdr *tar.Header, name string, lim ReadLimits) error {
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeDir:
	case tar.TypeSymlink, tar.TypeLink:
		return invalid("entry %q is a link", name)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return invalid("entry %q is a device or FIFO", name)
	default:
		return invalid("entry %q has tar type %q", name, hdr.Typeflag)
	}
	if len(name) > lim.NameBytes {
		return invalid("an entry's name is %d bytes, above the limit of %d", len(name), lim.NameBytes)
	}
	if strings.Count(name, "/") >= lim.Depth {
		return invalid("entry %q is deeper than %d folders", name, lim.Depth)
	}
	if err := checkName(name); err != nil {
		return invalid("entry %q: %v", name, err)
	}
	switch {
	case hdr.Typeflag == tar.TypeDir && hdr.Mode != 0o755,
		hdr.Typeflag == tar.TypeReg && hdr.Mode != 0o644 && hdr.Mode != 0o755,
		hdr.Uid != 0 || hdr.Gid != 0 || hdr.Uname != "" || hdr.Gname != "",
		hdr.ModTime.Unix() != canonicalMtime:
		return invalid("entry %q does not have the canonical header", name)
	}
	// Extended attributes and anything else arrive as PAX records.
	for k := range hdr.PAXRecords {
		if k != "path" {
			return invalid("entry %q carries the PAX record %q", name, k)
		}
	}
	return nil
}

// checkName refuses names that are not clean relative paths.
func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("empty name")
	case !utf8.ValidString(name), strings.ContainsRune(name, 0):
		return errors.New("name is not clean UTF-8")
	case path.IsAbs(name):
		return errors.New("absolute name")
	case path.Clean(name) != name:
		return errors.New("name is not clean")
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return errors.New("name leaves its folder through a .. element")
		}
	}
	return nil
}

// countingHash hashes and counts what it is written.
type countingHash struct {
	hash.Hash
	n int64
}

func (c *countingHash) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.Hash.Write(p)
}

// sourceReader remembers the error of the underlying reader, so that a
// failure to read the file is told apart from a bundle that is corrupt.
type sourceReader struct {
	r   io.Reader
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		s.err = err
	}
	return n, err
}

// classify calls a failure the source's own an I/O error, and anything else
// (a cut-off or corrupt stream, a limit passed) an invalid bundle.
func (s *sourceReader) classify(what string, err error) error {
	if s.err != nil {
		return fmt.Errorf("read bundle: %w", s.err)
	}
	return invalid("%s: %v", what, err)
}

// capReader fails once more than left bytes have been read.
type capReader struct {
	r           io.Reader
	limit, left int64
}

type overLimit struct{ limit int64 }

func (e *overLimit) Error() string {
	return fmt.Sprintf("more than %d uncompressed bytes", e.limit)
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left < 0 {
		return 0, &overLimit{c.limit}
	}
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left < 0 {
		return n, &overLimit{c.limit}
	}
	return n, err
}
