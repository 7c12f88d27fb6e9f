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
// DIR/sha256/HEX.tar.zst, with its tenant in HEX.tenant. A bundle is written to a temporary file, synced,
// renamed into place and its folder synced, so that a crash leaves either
// the whole bundle or none of it; the temporary files of a crash are removed
// when the store is opened. Past the quota, the oldest bundles go first.
type Store struct {
	dir       string
	maxBundle int64
	quota     int64
	level     zstd.EncoderLevel

	mu      sync.Mutex
	total   int64
	evicted int64 // bundles evict removed
	// pending are the bundles of WriteLater not in place yet.
	pending  map[string]*pendingBundle
	flushers sync.WaitGroup
	// encoders are kept for the next bundles (see encoder); forget lets
	// all but one go once the store has been idle for encoderIdle.
	encoders chan *zstd.Encoder
	forget   *time.Timer
	// signer signs each bundle as it is stored; nil stores none signed.
	signer Signer
}

// Signer signs a bundle: m as written, whose digest is digest. The
// signature (an attestation) is kept beside the bundle.
type Signer interface {
	Sign(m *Manifest, digest string) ([]byte, error)
}

// SignWith makes the store sign every bundle it stores from now on.
func (s *Store) SignWith(sg Signer) { s.signer = sg }

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
// Bundles are compressed at zstd's fastest level: 2-4x faster than the
// default level here, its files 11% larger on source code and 16% smaller
// on CSV, and a new encoder allocates 664 KiB, not 1.7 MiB.
func DefaultStoreOptions() StoreOptions {
	return StoreOptions{MaxBundleBytes: 256 << 20, QuotaBytes: 10 << 30, Level: zstd.SpeedFastest}
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
// temporary files an interrupted write left behind, and owner records
// without their bundles.
func OpenStore(dir string, opts StoreOptions) (*Store, error) {
	if opts.MaxBundleBytes <= 0 || opts.QuotaBytes < opts.MaxBundleBytes {
		return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("artifact store: the quota (%d) must hold at least one bundle of the maximum size (%d)", opts.QuotaBytes, opts.MaxBundleBytes))
	}
	s := &Store{dir: filepath.Join(dir, "sha256"), maxBundle: opts.MaxBundleBytes, quota: opts.QuotaBytes, level: opts.Level,
		encoders: make(chan *zstd.Encoder, keptEncoders)}
	s.forget = time.AfterFunc(time.Hour, s.dropSpares)
	s.forget.Stop()
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		orphan := false
		for _, suffix := range []string{ownerSuffix, AttestationSuffix} {
			if hex, ok := strings.CutSuffix(e.Name(), suffix); ok {
				// The owner or signature of a bundle that a crash kept
				// from its place.
				_, err := os.Stat(filepath.Join(s.dir, hex+bundleSuffix))
				orphan = errors.Is(err, fs.ErrNotExist)
			}
		}
		if strings.HasPrefix(e.Name(), tempPrefix) || orphan {
			if err := os.Remove(filepath.Join(s.dir, e.Name())); err != nil {
				return nil, err
			}
			continue
		}
		if info, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), bundleSuffix) {
			s.total += info.Size()
		}
	}
	return s, nil
}

// MaxBundleBytes is the cap on one bundle's uncompressed size.
func (s *Store) MaxBundleBytes() int64 { return s.maxBundle }

// Write builds a bundle of m and sources into the store and returns its
// digest and compressed size, once the bundle is durable.
func (s *Store) Write(m *Manifest, sources []Source) (string, int64, error) {
	tmp, digest, size, err := s.build(m, sources)
	if err != nil {
		return "", 0, err
	}
	return digest, size, s.commit(tmp, digest, size, m)
}

// WriteLater builds a bundle like Write and returns its digest at once;
// the bundle is made durable and visible in the background, a few
// milliseconds later, and Open waits for it. A crash in between loses the
// bundle whole, never leaves part of it. It is for the calls of a session,
// whose container a crash loses anyway, and whose latency is a few
// milliseconds in all.
func (s *Store) WriteLater(m *Manifest, sources []Source) (string, int64, error) {
	tmp, digest, size, err := s.build(m, sources)
	if err != nil {
		return "", 0, err
	}
	s.mu.Lock()
	if s.pending == nil {
		s.pending = map[string]*pendingBundle{}
	}
	if _, ok := s.pending[digest]; ok {
		// The same content is on its way already.
		s.mu.Unlock()
		tmp.Close()
		os.Remove(tmp.Name())
		return digest, size, nil
	}
	p := &pendingBundle{done: make(chan struct{})}
	s.pending[digest] = p
	s.mu.Unlock()
	s.flushers.Add(1)
	go func() {
		defer s.flushers.Done()
		p.err = s.commit(tmp, digest, size, m)
		s.mu.Lock()
		delete(s.pending, digest)
		s.mu.Unlock()
		close(p.done)
	}()
	return digest, size, nil
}

// pendingBundle is a bundle of WriteLater on its way to the store.
type pendingBundle struct {
	done chan struct{}
	err  error
}

// Flush waits until every bundle of WriteLater is in the store.
func (s *Store) Flush() { s.flushers.Wait() }

// build writes the bundle of m and sources, compressed, to a temporary
// file of the store.
func (s *Store) build(m *Manifest, sources []Source) (*os.File, string, int64, error) {
	tmp, err := os.CreateTemp(s.dir, tempPrefix+"*")
	if err != nil {
		return nil, "", 0, err
	}
	fail := func(err error) (*os.File, string, int64, error) {
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, "", 0, err
	}
	enc, err := s.encoder(tmp)
	if err != nil {
		return fail(err)
	}
	capped := &capWriter{w: enc, left: s.maxBundle}
	digest, err := Build(capped, m, sources)
	if err == nil {
		err = enc.Close()
	}
	s.keep(enc, s.maxBundle-capped.left)
	if err != nil {
		return fail(err)
	}
	info, err := tmp.Stat()
	if err != nil {
		return fail(err)
	}
	return tmp, digest, info.Size(), nil
}

// encoder is a zstd encoder writing to w. A new one allocates and zeroes
// its match tables, 1-9 ms under load for a bundle that takes
// microseconds to compress, and its garbage brings the next collection
// nearer: one kept from an earlier bundle is taken first. (A sync.Pool
// empties at every other collection, which came every few runs.)
func (s *Store) encoder(w io.Writer) (*zstd.Encoder, error) {
	select {
	case enc := <-s.encoders:
		enc.Reset(w)
		return enc, nil
	default:
	}
	return zstd.NewWriter(w, zstd.WithEncoderLevel(s.level), zstd.WithWindowSize(EncoderWindow), zstd.WithEncoderConcurrency(1))
}

// keptEncoders is how many encoders the store keeps between bundles, for
// as many bundles as a small host builds at once.
const keptEncoders = 2

// encoderIdle is how long spare encoders outlive the last bundle: shorter
// than the gap after which the daemon gives its heap back to the system.
const encoderIdle = time.Second

// keep keeps enc, which has just written a bundle of n bytes, for a later
// bundle, unless enough are kept or n grew its history: past one zstd block
// (128 KiB) that is a buffer of twice the window, 8 MiB, which a bundle that
// large would not miss.
func (s *Store) keep(enc *zstd.Encoder, n int64) {
	// An encoder is reused after Close, or after Reset following an error.
	enc.Reset(nil)
	if n > 128<<10 {
		return
	}
	select {
	case s.encoders <- enc:
		s.forget.Reset(encoderIdle)
	default:
	}
}

// dropSpares lets the kept encoders go but one, ~0.7 MiB: an agent's runs
// come seconds apart, and without it each paid 3-9 ms for a new encoder.
func (s *Store) dropSpares() {
	for len(s.encoders) > 1 {
		select {
		case <-s.encoders:
		default:
			return
		}
	}
}

// commit syncs the temporary file tmp of a built bundle, records its
// tenant and its signature, renames it into place and syncs the folder.
func (s *Store) commit(tmp *os.File, digest string, size int64, m *Manifest) error {
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	hex, _ := ParseDigest(digest)
	final := filepath.Join(s.dir, hex+bundleSuffix)
	if _, err := os.Stat(final); err == nil {
		// The same content is already stored.
		return nil
	}
	// The file's sync (~1 ms here) runs while the owner and the signature
	// are written: only the rename must come after it.
	synced := make(chan error, 1)
	go func() { synced <- tmp.Sync() }()
	err := s.writeOwnerAndSignature(hex, digest, m)
	if serr := <-synced; err == nil {
		err = serr
	}
	if err == nil {
		err = tmp.Close()
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return err
	}
	committed = true
	if err := syncDir(s.dir); err != nil {
		return err
	}
	s.mu.Lock()
	s.total += size
	s.mu.Unlock()
	return s.evict(final)
}

// writeOwnerAndSignature writes the owner and the signature of the bundle
// hex, whose manifest is m, beside it. The owner goes first, so that no
// bundle is ever seen without it; their names are made durable with the
// bundle's by the folder's sync.
func (s *Store) writeOwnerAndSignature(hex, digest string, m *Manifest) error {
	if err := s.writeBeside(hex, ownerSuffix, []byte(m.Run.Tenant)); err != nil {
		return err
	}
	if s.signer == nil {
		return nil
	}
	att, err := s.signer.Sign(m, digest)
	if err != nil {
		return fmt.Errorf("sign the bundle: %w", err)
	}
	return s.writeBeside(hex, AttestationSuffix, att)
}

// wait waits until a bundle of WriteLater with digest d is in place, and
// returns why it was not stored, if it was not.
func (s *Store) wait(d string) error {
	s.mu.Lock()
	p := s.pending[d]
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	<-p.done
	return p.err
}

// Open opens the bundle with digest d for reading.
func (s *Store) Open(d string) (*os.File, error) {
	hex, err := ParseDigest(d)
	if err != nil {
		return nil, err
	}
	if err := s.wait(d); err != nil {
		return nil, fmt.Errorf("bundle %s was not stored: %w", d, err)
	}
	f, err := os.Open(filepath.Join(s.dir, hex+bundleSuffix))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("bundle %s is not in the store (it may have been evicted)", d))
	}
	return f, err
}

// A bundle's file, and the ones beside it that record its tenant and its
// signature (a DSSE envelope; see package provenance).
const (
	bundleSuffix      = ".tar.zst"
	ownerSuffix       = ".tenant"
	AttestationSuffix = ".intoto.json"
)

// writeBeside writes b as the file of the bundle hex with suffix, unless b
// is empty.
func (s *Store) writeBeside(hex, suffix string, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	tmp, err := os.CreateTemp(s.dir, tempPrefix+"*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(s.dir, hex+suffix))
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// Owner is the tenant whose run made the bundle with digest d, or "" for
// a bundle stored without one. A crash just after a write may leave it
// empty: then only those who see every tenant's bundles see it.
func (s *Store) Owner(d string) (string, error) {
	hex, err := ParseDigest(d)
	if err != nil {
		return "", err
	}
	// A bundle that was not stored has neither; Open says why.
	_ = s.wait(d)
	b, err := os.ReadFile(filepath.Join(s.dir, hex+ownerSuffix))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return string(b), err
}

// Attestation is the signature of the bundle with digest d, or nil when it
// was stored unsigned.
func (s *Store) Attestation(d string) ([]byte, error) {
	hex, err := ParseDigest(d)
	if err != nil {
		return nil, err
	}
	// A bundle that was not stored has neither; Open says why.
	_ = s.wait(d)
	b, err := os.ReadFile(filepath.Join(s.dir, hex+AttestationSuffix))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// Usage is the compressed size of the stored bundles, and how many have
// been removed to keep within the quota since the store was opened.
func (s *Store) Usage() (bytes, evicted int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total, s.evicted
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
		if err != nil || !strings.HasSuffix(e.Name(), bundleSuffix) {
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
		_ = os.Remove(strings.TrimSuffix(b.path, bundleSuffix) + ownerSuffix)
		_ = os.Remove(strings.TrimSuffix(b.path, bundleSuffix) + AttestationSuffix)
		s.total -= b.size
		s.evicted++
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
