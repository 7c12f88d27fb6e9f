package artifacts

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/klauspost/compress/zstd"
)

// Store keeps bundles on the local file system, content-addressed as
// DIR/sha256/HEX.tar.zst. A bundle is written to a temporary file, synced,
// renamed into place and its folder synced, so that a crash leaves either
// the whole bundle or none of it; the temporary files of a crash are removed
// when the store is opened. Past the quota, the oldest bundles go first.
type Store struct {
	dir       string
	maxBundle int64
	quota     int64
	level     zstd.EncoderLevel

	mu    sync.Mutex
	total int64
}

// StoreOptions configure a Store.
type StoreOptions struct {
	// MaxBundleBytes caps one bundle's uncompressed size.
	MaxBundleBytes int64
	// QuotaBytes caps the compressed size of all bundles together.
	QuotaBytes int64
	// Level is the zstd level; it changes the files, never the digests.
	Level zstd.EncoderLevel
}

// DefaultStoreOptions are the options of a daemon started without flags.
func DefaultStoreOptions() StoreOptions {
	return StoreOptions{MaxBundleBytes: 256 << 20, QuotaBytes: 10 << 30, Level: zstd.SpeedDefault}
}

const tempPrefix = ".tmp-"

var digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// ParseDigest refuses anything but "sha256:" and 64 lower-case hex digits.
func ParseDigest(d string) (hex string, err error) {
	if !digestPattern.MatchString(d) {
		return "", errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("digest %q is not sha256:<64 hex digits>", d))
	}
	return strings.TrimPrefix(d, "sha256:"), nil
}

// OpenStore opens (creating it if needed) the store in dir, and removes the
// temporary files an interrupted write left behind.
func OpenStore(dir string, opts StoreOptions) (*Store, error) {
	if opts.MaxBundleBytes <= 0 || opts.QuotaBytes < opts.MaxBundleBytes {
		return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("artifact store: the quota (%d) must hold at least one bundle of the maximum size (%d)", opts.QuotaBytes, opts.MaxBundleBytes))
	}
	s := &Store{dir: filepath.Join(dir, "sha256"), maxBundle: opts.MaxBundleBytes, quota: opts.QuotaBytes, level: opts.Level}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tempPrefix) {
			if err := os.Remove(filepath.Join(s.dir, e.Name())); err != nil {
				return nil, err
			}
			continue
		}
		if info, err := e.Info(); err == nil {
			s.total += info.Size()
		}
	}
	return s, nil
}

// MaxBundleBytes is the cap on one bundle's uncompressed size.
func (s *Store) MaxBundleBytes() int64 { return s.maxBundle }

// Write builds a bundle of m and sources into the store and returns its
// digest and compressed size.
func (s *Store) Write(m *Manifest, sources []Source) (string, int64, error) {
	tmp, err := os.CreateTemp(s.dir, tempPrefix+"*")
	if err != nil {
		return "", 0, err
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	enc, err := zstd.NewWriter(tmp, zstd.WithEncoderLevel(s.level), zstd.WithWindowSize(EncoderWindow), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return "", 0, err
	}
	capped := &capWriter{w: enc, left: s.maxBundle}
	digest, err := Build(capped, m, sources)
	if err != nil {
		enc.Close()
		return "", 0, err
	}
	if err := enc.Close(); err != nil {
		return "", 0, err
	}
	if err := tmp.Sync(); err != nil {
		return "", 0, err
	}
	info, err := tmp.Stat()
	if err != nil {
		return "", 0, err
	}
	if err := tmp.Close(); err != nil {
		return "", 0, err
	}
	hex, _ := ParseDigest(digest)
	final := filepath.Join(s.dir, hex+".tar.zst")
	if _, err := os.Stat(final); err == nil {
		// The same content is already stored.
		os.Remove(tmp.Name())
		committed = true
		return digest, info.Size(), nil
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return "", 0, err
	}
	committed = true
	if err := syncDir(s.dir); err != nil {
		return "", 0, err
	}
	s.mu.Lock()
	s.total += info.Size()
	s.mu.Unlock()
	return digest, info.Size(), s.evict(final)
}

// Open opens the bundle with digest d for reading.
func (s *Store) Open(d string) (*os.File, error) {
	hex, err := ParseDigest(d)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(s.dir, hex+".tar.zst"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("bundle %s is not in the store (it may have been evicted)", d))
	}
	return f, err
}

// evict removes the oldest bundles, but keep, until the total fits the
// quota.
func (s *Store) evict(keep string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.total <= s.quota {
		return nil
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	type bundle struct {
		path string
		size int64
		mod  time.Time
	}
	var all []bundle
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || strings.HasPrefix(e.Name(), tempPrefix) {
			continue
		}
		all = append(all, bundle{filepath.Join(s.dir, e.Name()), info.Size(), info.ModTime()})
	}
	slices.SortFunc(all, func(a, b bundle) int { return a.mod.Compare(b.mod) })
	for _, b := range all {
		if s.total <= s.quota {
			break
		}
		if b.path == keep {
			continue
		}
		if err := os.Remove(b.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		s.total -= b.size
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// capWriter fails once more than left bytes are written.
type capWriter struct {
	w    io.Writer
	left int64
}

// ErrTooLarge refuses a bundle above the store's size cap.
var ErrTooLarge = errdefs.ErrResourceExhausted.WithMessage("the bundle is larger than the store's cap per bundle")

func (c *capWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		return 0, ErrTooLarge
	}
	c.left -= int64(len(p))
	return c.w.Write(p)
}
