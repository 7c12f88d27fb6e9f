package artifacts

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/klauspost/compress/zstd"

	"github.com/sandboxd/sandboxd/limits"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func testManifest() *Manifest {
	return &Manifest{
		Reproducible: Reproducible{
			Request: Request{
				Kind: "code", Language: "python", Argv: []string{"python3", "/code/main.py"},
				Limits:  limits.Limits{MemoryBytes: 512 << 20, CPUMillis: 1000, Pids: 128, Timeout: 30 * time.Second, StdoutBytes: 1 << 20, StderrBytes: 1 << 20, DiskBytes: 256 << 20},
				Network: "none", Mounts: []string{}, Env: map[string]string{"B": "2", "A": "1"}, Workdir: "/workspace",
				Files: []InputFile{{Path: "data/in.csv"}},
			},
			Image: "sandboxd/python", ImageDigest: "sha256:" + strings.Repeat("ab", 32),
			Runtime: Runtime{Name: "runc", Version: "1.1.5"}, Backend: "docker",
			Environment: []string{"PYTHONHASHSEED=0", "TZ=UTC"},
			Determinism: map[string]string{"PYTHONHASHSEED": "0", "TZ": "UTC"},
			Outcome:     Outcome{Status: "OK", StdoutTotal: 3},
			Outputs:     []Output{{Path: "out.txt", Type: "file", Size: 2}, {Path: "link", Type: "symlink"}},
		},
		Run: Run{RunID: "0123", Instance: "default", Version: "test", StartedAt: time.Unix(1700000000, 0).UTC(), DurationMs: 12.5},
	}
}

func testSources() []Source {
	return []Source{
		BytesSource("stdout", []byte("42\n"), false),
		BytesSource("stderr", nil, false),
		BytesSource("code/main.py", []byte("print(42)\n"), false),
		BytesSource("input/data/in.csv", []byte("a,b\n1,2\n"), false),
		BytesSource("output/out.txt", []byte("hi"), false),
		BytesSource("output/bin/tool", []byte("#!/bin/sh\n"), true),
	}
}

// build returns a compressed bundle of the test manifest and sources.
func build(t *testing.T, level zstd.EncoderLevel) ([]byte, string) {
	t.Helper()
	var tarBuf bytes.Buffer
	digest, err := Build(&tarBuf, testManifest(), testSources())
	if err != nil {
		t.Fatal(err)
	}
	return compress(t, tarBuf.Bytes(), level), digest
}

func compress(t *testing.T, b []byte, level zstd.EncoderLevel) []byte {
	t.Helper()
	var out bytes.Buffer
	enc, err := zstd.NewWriter(&out, zstd.WithEncoderLevel(level), zstd.WithWindowSize(EncoderWindow))
	if err != nil {
		t.Fatal(err)
	}
	enc.Write(b)
	enc.Close()
	return out.Bytes()
}

func TestManifestGolden(t *testing.T) {
	bundle, digest := build(t, zstd.SpeedDefault)
	b, err := Verify(bytes.NewReader(bundle), digest, DefaultReadLimits(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var manifest []byte
	tr := tar.NewReader(mustDecompress(t, bundle))
	for {
		hdr, err := tr.Next()
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Name == ManifestPath {
			manifest, _ = io.ReadAll(tr)
			break
		}
	}
	got := append(manifest, []byte("digest: "+b.Digest+"\n")...)
	path := filepath.Join("testdata", "manifest.golden")
	if *update {
		os.MkdirAll("testdata", 0o755)
		os.WriteFile(path, got, 0o644)
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the manifest or digest changed; if intended, run go test -update\n%s", got)
	}
}

func mustDecompress(t *testing.T, b []byte) io.Reader {
	t.Helper()
	dec, err := zstd.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(dec)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(out)
}

func TestDigestIgnoresCompressionLevel(t *testing.T) {
	fast, d1 := build(t, zstd.SpeedFastest)
	best, d2 := build(t, zstd.SpeedBestCompression)
	if bytes.Equal(fast, best) {
		t.Fatal("the two levels gave the same bytes; the test proves nothing")
	}
	if d1 != d2 {
		t.Fatalf("digests differ across levels: %s %s", d1, d2)
	}
	for _, b := range [][]byte{fast, best} {
		got, err := Verify(bytes.NewReader(b), d1, DefaultReadLimits(), nil)
		if err != nil || got.Digest != d1 {
			t.Fatalf("Verify() = %v, %v", got, err)
		}
	}
}

func TestRunSectionKeptApart(t *testing.T) {
	var a, b bytes.Buffer
	m1, m2 := testManifest(), testManifest()
	m2.Run.RunID, m2.Run.DurationMs, m2.Run.StartedAt = "other", 99, time.Now()
	d1, _ := Build(&a, m1, testSources())
	d2, _ := Build(&b, m2, testSources())
	if d1 == d2 {
		t.Fatal("two runs got the same bundle digest")
	}
	if m1.Run.ReproducibleDigest != m2.Run.ReproducibleDigest {
		t.Fatal("the reproducible digests differ though only the run section does")
	}
	m2.Reproducible.Outcome.ExitCode = 1
	var c bytes.Buffer
	Build(&c, m2, testSources())
	if m1.Run.ReproducibleDigest == m2.Run.ReproducibleDigest {
		t.Fatal("a different outcome kept the reproducible digest")
	}
}

// rawEntry is one entry of a hand-made tar.
type rawEntry struct {
	hdr  tar.Header
	body []byte
}

func file(name, body string) rawEntry {
	return rawEntry{tar.Header{Typeflag: tar.TypeReg, Name: name, Size: int64(len(body)), Mode: 0o644, ModTime: time.Unix(0, 0)}, []byte(body)}
}

func dir(name string) rawEntry {
	return rawEntry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755, ModTime: time.Unix(0, 0)}}
}

func rawTar(t *testing.T, entries ...rawEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		tw.Write(e.body)
	}
	tw.Close()
	return buf.Bytes()
}

// tarOf returns the uncompressed canonical tar of the test bundle.
func tarOf(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := Build(&buf, testManifest(), testSources()); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestVerifyRefusesTampering(t *testing.T) {
	good, digest := build(t, zstd.SpeedDefault)
	canonical := tarOf(t)
	replace := func(old, new string) []byte {
		if !bytes.Contains(canonical, []byte(old)) {
			t.Fatalf("%q is not in the tar", old)
		}
		return compress(t, bytes.Replace(canonical, []byte(old), []byte(new), 1), zstd.SpeedDefault)
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x01
	tests := []struct {
		name   string
		bundle []byte
		want   string
	}{
		{"a flipped byte in the compressed file", flipped, ""},
		{"a changed byte in an entry", replace("print(42)", "print(43)"), "does not match its SHA-256"},
		{"a renamed entry", replace("output/out.txt", "output/our.txt"), ""},
		{"an edited manifest", replace(`"status": "OK"`, `"status": "NO"`), "reproducible section does not match"},
		{"an edited run section", replace(`"run_id": "0123"`, `"run_id": "9999"`), "digest is"},
		{"truncated", good[:len(good)-40], ""},
		{"trailing bytes", append(bytes.Clone(good), []byte("junk")...), ""},
		{"a second frame after the tar", append(bytes.Clone(good), compress(t, make([]byte, 512), zstd.SpeedDefault)...), "follow the end of the tar"},
		{"not zstd", canonical, ""},
		{"empty", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Verify(bytes.NewReader(tt.bundle), digest, DefaultReadLimits(), nil)
			if err == nil {
				t.Fatal("Verify() accepted it")
			}
			if !errdefs.IsDataLoss(err) {
				t.Fatalf("Verify() = %v, not classified as an invalid bundle", err)
			}
			if tt.want != "" && !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Verify() = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestVerifyRefusesHostileBundles(t *testing.T) {
	link := rawEntry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "output/x", Linkname: "/etc/shadow", ModTime: time.Unix(0, 0), Mode: 0o777}}
	hard := rawEntry{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "output/x", Linkname: "manifest.json", ModTime: time.Unix(0, 0), Mode: 0o644}}
	dev := rawEntry{hdr: tar.Header{Typeflag: tar.TypeChar, Name: "output/x", Devmajor: 1, Devminor: 3, ModTime: time.Unix(0, 0), Mode: 0o644}}
	fifo := rawEntry{hdr: tar.Header{Typeflag: tar.TypeFifo, Name: "output/x", ModTime: time.Unix(0, 0), Mode: 0o644}}
	owned := file("stdout", "x")
	owned.hdr.Uid = 1000
	dated := file("stdout", "x")
	dated.hdr.ModTime = time.Now()
	setuid := file("stdout", "x")
	setuid.hdr.Mode = 0o4755
	xattr := file("stdout", "x")
	xattr.hdr.PAXRecords = map[string]string{"SCHILY.xattr.security.capability": "x"}
	deep := strings.Repeat("d/", 50) + "f"
	var deepEntries []rawEntry
	for i := 1; i <= 50; i++ {
		deepEntries = append(deepEntries, dir(strings.TrimSuffix(strings.Repeat("d/", i), "/")))
	}
	deepEntries = append(deepEntries, file(deep, "x"))
	var many []rawEntry
	for i := range 70 {
		many = append(many, file(fmt.Sprintf("f%03d", i), ""))
	}
	tests := []struct {
		name    string
		entries []rawEntry
		want    string
	}{
		{"dot-dot", []rawEntry{file("../evil", "x")}, "leaves its folder"},
		{"inner dot-dot", []rawEntry{dir("a"), file("a/../../evil", "x")}, "not clean"},
		{"absolute", []rawEntry{file("/etc/cron.d/evil", "x")}, "absolute"},
		{"symlink", []rawEntry{dir("output"), link}, "is a link"},
		{"hard link", []rawEntry{dir("output"), hard}, "is a link"},
		{"device", []rawEntry{dir("output"), dev}, "device"},
		{"fifo", []rawEntry{dir("output"), fifo}, "device or FIFO"},
		{"duplicate", []rawEntry{file("stdout", "a"), file("stdout", "b")}, "given twice"},
		{"out of order", []rawEntry{file("stdout", "a"), file("stderr", "b")}, "out of order"},
		{"enormous name", []rawEntry{file(strings.Repeat("n", 5000), "x")}, "above the limit"},
		{"depth", deepEntries, "deeper than"},
		{"too many entries", many, "more than 60 entries"},
		{"file without its folder", []rawEntry{file("output/x", "x")}, "without its folder"},
		{"owner", []rawEntry{owned}, "canonical header"},
		{"mtime", []rawEntry{dated}, "canonical header"},
		{"setuid", []rawEntry{setuid}, "canonical header"},
		{"extended attribute", []rawEntry{xattr}, "PAX record"},
		{"no manifest", []rawEntry{file("stdout", "x")}, "no manifest.json"},
	}
	lim := DefaultReadLimits()
	lim.Entries = 60
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			visited := 0
			_, err := Verify(bytes.NewReader(compress(t, rawTar(t, tt.entries...), zstd.SpeedDefault)), "", lim,
				func(string, io.Reader) error { visited++; return nil })
			if err == nil || !errdefs.IsDataLoss(err) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Verify() = %v, want an invalid bundle: %q", err, tt.want)
			}
		})
	}
}

// TestVerifyRefusesDecompressionBombs feeds a tiny frame that declares a
// huge window and content, and a real stream of gigabytes of zeros, and
// checks that both are refused with little memory.
func TestVerifyRefusesDecompressionBombs(t *testing.T) {
	// A frame header declaring a 2 GiB window and 4 GiB of content, then
	// RLE blocks: about 1 KiB in all.
	var hdr bytes.Buffer
	binary.Write(&hdr, binary.LittleEndian, uint32(0xFD2FB528))
	hdr.WriteByte(0xC0)                 // frame content size: 8 bytes; no single segment
	hdr.WriteByte(byte((31 - 10) << 3)) // window descriptor: 2^31
	binary.Write(&hdr, binary.LittleEndian, uint64(4<<30))
	for range 250 {
		// An RLE block of 128 KiB of zeros: 3-byte header, 1 byte.
		size := uint32(128<<10)<<3 | 1<<1
		hdr.Write([]byte{byte(size), byte(size >> 8), byte(size >> 16), 0})
	}
	tiny := hdr.Bytes()
	if len(tiny) > 1100 {
		t.Fatalf("the crafted frame is %d bytes", len(tiny))
	}

	// A stream that really inflates to 2 GiB of zeros.
	var big bytes.Buffer
	enc, _ := zstd.NewWriter(&big, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithWindowSize(EncoderWindow))
	zeros := make([]byte, 1<<20)
	for range 2048 {
		enc.Write(zeros)
	}
	enc.Close()
	t.Logf("the 2 GiB stream compresses to %d KiB", big.Len()>>10)

	for _, tt := range []struct {
		name   string
		bundle []byte
	}{{"declared huge window", tiny}, {"2 GiB of zeros", big.Bytes()}} {
		t.Run(tt.name, func(t *testing.T) {
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, err := Verify(bytes.NewReader(tt.bundle), "", DefaultReadLimits(), nil)
			runtime.ReadMemStats(&after)
			if err == nil || !errdefs.IsDataLoss(err) {
				t.Fatalf("Verify() = %v, want an invalid bundle", err)
			}
			grew := int64(after.TotalAlloc - before.TotalAlloc)
			if grew > 96<<20 {
				t.Fatalf("refusing it allocated %d MiB", grew>>20)
			}
			t.Logf("refused in %v having allocated %d MiB: %v", time.Since(start).Round(time.Millisecond), grew>>20, err)
		})
	}
}

func TestVisitSeesEntries(t *testing.T) {
	bundle, digest := build(t, zstd.SpeedDefault)
	got := map[string]string{}
	_, err := Verify(bytes.NewReader(bundle), digest, DefaultReadLimits(), func(p string, r io.Reader) error {
		b, err := io.ReadAll(r)
		got[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got["code/main.py"] != "print(42)\n" || got["output/out.txt"] != "hi" || len(got) != 6 {
		t.Fatalf("visited %v", got)
	}
}

func TestStore(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir, StoreOptions{MaxBundleBytes: 64 << 10, QuotaBytes: 3 * (64 << 10), Level: zstd.SpeedDefault})
	if err != nil {
		t.Fatal(err)
	}
	var digests []string
	for i := range 12 {
		m := testManifest()
		m.Run.RunID, m.Run.Tenant = fmt.Sprint(i), fmt.Sprint("tenant-", i%2)
		// Incompressible content so that the quota fills.
		noise := randomBytes(40<<10, uint64(i))
		d, _, err := s.Write(m, append(testSources(), BytesSource("output/noise", noise, false)))
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d)
		time.Sleep(5 * time.Millisecond) // distinct modification times
	}
	var total int64
	entries, _ := os.ReadDir(filepath.Join(dir, "sha256"))
	for _, e := range entries {
		info, _ := e.Info()
		total += info.Size()
	}
	if total > 3*(64<<10) {
		t.Fatalf("the store holds %d bytes, above its quota", total)
	}
	if _, err := s.Open(digests[0]); !errdefs.IsNotFound(err) {
		t.Fatalf("the oldest bundle is still there: %v", err)
	}
	if owners, _ := filepath.Glob(filepath.Join(dir, "sha256", "*"+ownerSuffix)); len(owners) != len(entries)/2 {
		t.Fatalf("%d owner records for %d files: evicted bundles left theirs", len(owners), len(entries))
	}
	orphan := filepath.Join(dir, "sha256", strings.Repeat("0", 64)+ownerSuffix)
	os.WriteFile(orphan, []byte("team-a"), 0o600)
	if _, err := OpenStore(dir, StoreOptions{MaxBundleBytes: 64 << 10, QuotaBytes: 3 * (64 << 10), Level: zstd.SpeedDefault}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(orphan); err == nil {
		t.Fatal("an owner record without its bundle outlived a reopening")
	}
	for i, d := range digests[len(digests)-2:] {
		if owner, err := s.Owner(d); err != nil || owner != fmt.Sprint("tenant-", i) {
			t.Fatalf("Owner(bundle %d) = %q, %v", 10+i, owner, err)
		}
	}
	f, err := s.Open(digests[len(digests)-1])
	if err != nil {
		t.Fatalf("the newest bundle was evicted: %v", err)
	}
	if _, err := Verify(f, digests[len(digests)-1], DefaultReadLimits(), nil); err != nil {
		t.Fatal(err)
	}
	f.Close()

	if _, err := s.Open("sha256:../../etc/passwd"); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("Open(traversal) = %v", err)
	}
	huge := randomBytes(128<<10, 7)
	if _, _, err := s.Write(testManifest(), []Source{BytesSource("stdout", huge, false)}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a bundle above the cap: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "sha256", tempPrefix+"*")); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// TestKill9WhileWriting kills a process in the middle of writing a large
// bundle; reopening the store leaves no partial bundle, and every stored
// bundle verifies.
func TestKill9WhileWriting(t *testing.T) {
	if os.Getenv("SANDBOXD_STORE_WRITER") != "" {
		writeForever(os.Getenv("SANDBOXD_STORE_WRITER"))
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestKill9WhileWriting$")
	cmd.Env = append(os.Environ(), "SANDBOXD_STORE_WRITER="+dir)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until one bundle is complete and the next is being written.
	buf := make([]byte, 64)
	n, _ := stdout.Read(buf)
	if !strings.Contains(string(buf[:n]), "stored") {
		t.Fatalf("the writer said %q", buf[:n])
	}
	// Generous: under -race, beside every other package's tests on two
	// cores, the compressor can take seconds to flush its first block.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		tmps, _ := filepath.Glob(filepath.Join(dir, "sha256", tempPrefix+"*"))
		if len(tmps) > 0 {
			if info, err := os.Stat(tmps[0]); err == nil && info.Size() > 256<<10 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the writer never got into a large bundle")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()

	s, err := OpenStore(dir, DefaultStoreOptions())
	if err != nil {
		t.Fatal(err)
	}
	_ = s
	entries, _ := os.ReadDir(filepath.Join(dir, "sha256"))
	if len(entries) == 0 {
		t.Fatal("no bundle was stored before the kill")
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tempPrefix) {
			t.Fatalf("a partial bundle is visible: %s", e.Name())
		}
		if strings.HasSuffix(e.Name(), ownerSuffix) {
			continue
		}
		f, err := os.Open(filepath.Join(dir, "sha256", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		want := "sha256:" + strings.TrimSuffix(e.Name(), ".tar.zst")
		if _, err := Verify(f, want, DefaultReadLimits(), nil); err != nil {
			t.Fatalf("%s does not verify after the crash: %v", e.Name(), err)
		}
		f.Close()
	}
}

// writeForever writes large bundles until killed, saying when the first
// is stored.
func writeForever(dir string) {
	s, err := OpenStore(dir, DefaultStoreOptions())
	if err != nil {
		panic(err)
	}
	for i := 0; ; i++ {
		m := testManifest()
		m.Run.RunID = fmt.Sprint(i)
		size := int64(64 << 20)
		if i == 0 {
			size = 1 << 20
		}
		slow := Source{Path: "output/large", Size: size, Open: func() (io.ReadCloser, error) {
			return io.NopCloser(&slowNoise{left: size, seed: byte(i)}), nil
		}}
		if _, _, err := s.Write(m, append(testSources(), slow)); err != nil {
			panic(err)
		}
		if i == 0 {
			fmt.Println("stored")
		}
	}
}

// slowNoise yields incompressible bytes slowly enough to be caught mid-write.
type slowNoise struct {
	left int64
	seed byte
	x    uint32
}

func (s *slowNoise) Read(p []byte) (int, error) {
	if s.left == 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), s.left, 32<<10)]
	x := s.x // a local: the race detector would check every store to s.x
	for i := range p {
		x = x*1664525 + 1013904223 + uint32(s.seed)
		p[i] = byte(x >> 24)
	}
	s.x = x
	s.left -= int64(len(p))
	time.Sleep(200 * time.Microsecond)
	return len(p), nil
}

// randomBytes returns n incompressible bytes, the same for the same seed.
func randomBytes(n int, seed uint64) []byte {
	var out []byte
	block := sha256.Sum256(binary.LittleEndian.AppendUint64(nil, seed))
	for len(out) < n {
		block = sha256.Sum256(block[:])
		out = append(out, block[:]...)
	}
	return out[:n]
}

func TestWriteLaterIsReadableAtOnceAndDurableAfterFlush(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir, DefaultStoreOptions())
	if err != nil {
		t.Fatal(err)
	}
	var digests []string
	for i := range 20 {
		m := testManifest()
		m.Run.RunID = fmt.Sprint(i)
		d, _, err := s.WriteLater(m, testSources())
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d)
		// Readable as soon as the digest is known: Open waits for it.
		f, err := s.Open(d)
		if err != nil {
			t.Fatalf("Open() right after WriteLater: %v", err)
		}
		if _, err := Verify(f, d, DefaultReadLimits(), nil); err != nil {
			t.Fatalf("the bundle does not verify: %v", err)
		}
		f.Close()
	}
	s.Flush()
	entries, _ := os.ReadDir(filepath.Join(dir, "sha256"))
	if len(entries) != len(digests) {
		t.Fatalf("%d files in the store after Flush, want %d and no temporary one", len(entries), len(digests))
	}
	// A reopened store has them all.
	again, err := OpenStore(dir, DefaultStoreOptions())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range digests {
		f, err := again.Open(d)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
}

// TestStoreKeepsEncodersAcrossCollections: a bundle of a few KiB takes its
// encoder from the last bundle's, across garbage collections, instead of
// allocating its tables anew; a large bundle's encoder is let go, and so
// are all but one once the store is idle.
func TestStoreKeepsEncodersAcrossCollections(t *testing.T) {
	s, err := OpenStore(t.TempDir(), DefaultStoreOptions())
	if err != nil {
		t.Fatal(err)
	}
	write := func(i int, extra []Source) uint64 {
		t.Helper()
		m := testManifest()
		m.Run.RunID = fmt.Sprint(i)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if _, _, err := s.Write(m, append(testSources(), extra...)); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	fresh := write(0, nil)
	if len(s.encoders) != 1 {
		t.Fatalf("%d encoders kept after a small bundle, want 1", len(s.encoders))
	}
	runtime.GC()
	runtime.GC() // a sync.Pool is empty after two
	if kept := write(1, nil); kept > fresh/2 {
		t.Fatalf("a small bundle after two collections allocated %d KiB, the first %d KiB: its encoder was made anew", kept>>10, fresh>>10)
	}
	<-s.encoders
	write(2, []Source{BytesSource("output/noise", randomBytes(256<<10, 1), false)})
	if len(s.encoders) != 0 {
		t.Fatal("the encoder of a 256 KiB bundle, with its 8 MiB history, was kept")
	}
	// Two bundles built at once leave two encoders kept.
	a, _ := s.encoder(io.Discard)
	b, _ := s.encoder(io.Discard)
	s.keep(a, 0)
	s.keep(b, 0)
	if len(s.encoders) != 2 {
		t.Fatalf("%d encoders kept after two bundles at once, want 2", len(s.encoders))
	}
	deadline := time.Now().Add(encoderIdle + 5*time.Second)
	for len(s.encoders) > 1 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(2 * encoderIdle)
	if len(s.encoders) != 1 {
		t.Fatalf("%d encoders kept %v after the last bundle, want the one the next bundle takes", len(s.encoders), encoderIdle+5*time.Second)
	}
}

// TestKnownDigestReadsOnce: a source whose digest its writer already knows
// is read once, and the bundle is the same, byte for byte, as when Build
// hashes it itself.
func TestKnownDigestReadsOnce(t *testing.T) {
	var plain bytes.Buffer
	want, err := Build(&plain, testManifest(), testSources())
	if err != nil {
		t.Fatal(err)
	}
	opens := map[string]int{}
	sources := testSources()
	for i, s := range sources {
		b, err := readAll(s)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		open := s.Open
		sources[i].SHA256 = sum[:]
		sources[i].Open = func() (io.ReadCloser, error) { opens[s.Path]++; return open() }
	}
	var known bytes.Buffer
	got, err := Build(&known, testManifest(), sources)
	if err != nil {
		t.Fatal(err)
	}
	if got != want || !bytes.Equal(known.Bytes(), plain.Bytes()) {
		t.Fatalf("Build with known digests = %s, without %s (bytes equal: %v)", got, want, bytes.Equal(known.Bytes(), plain.Bytes()))
	}
	for _, s := range sources {
		if opens[s.Path] != 1 {
			t.Errorf("%s opened %d times, want once", s.Path, opens[s.Path])
		}
	}
}

func readAll(s Source) ([]byte, error) {
	r, err := s.Open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}
