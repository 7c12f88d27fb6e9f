// Package testutil holds what the repository's tests share: skipping (or,
// in CI, failing) when a backend or root is missing, how long a soak
// lasts, building the static binaries that containers run, golden files, a
// logger on the test's log, waiting for a condition, and test hosts in
// network namespaces of the test's own.
package testutil

import (
	"bytes"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// RequireBackendsEnv is set in CI (make test-integration): a test whose
// backend is missing fails there instead of skipping.
const RequireBackendsEnv = "SANDBOXD_REQUIRE_BACKENDS"

// SkipOrFail skips a test whose backend is missing, or fails it when
// RequireBackendsEnv is set, so that a suite that cannot run never passes
// silently in CI.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv(RequireBackendsEnv) != "" {
		t.Fatalf("required backend missing: %s", msg)
	}
	t.Skip(msg)
}

// SoakEnv is set by make soak: a test that repeats its case many times
// (Soak) repeats it as often as it was written to, where every other run
// (CI's among them) does so a few times.
const SoakEnv = "SANDBOXD_SOAK"

// Soak is how often a soaking test repeats its case: full under make soak,
// smoke otherwise. The test's log says which.
func Soak(t testing.TB, full, smoke int) int {
	t.Helper()
	if os.Getenv(SoakEnv) != "" {
		return full
	}
	t.Logf("%d times, not %d: make soak runs the whole soak", smoke, full)
	return smoke
}

// MatrixEnv, set to "all" by make test-matrix, runs what CI leaves to it:
// every case of the engine suite on every pair, and the image rebuild.
const MatrixEnv = "SANDBOXD_MATRIX"

// WholeMatrix says whether the tests run as make test-matrix runs them.
func WholeMatrix() bool { return os.Getenv(MatrixEnv) == "all" }

// RequireRoot skips (or fails, see SkipOrFail) unless the test runs as
// root, which the backends, mounts and network namespaces need.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		SkipOrFail(t, "this test drives a backend and needs root")
	}
}

// Logger returns a logger that writes to the test's log from level on.
func Logger(t testing.TB, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: level}))
}

type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// Golden compares got with the file testdata/name, which -update rewrites.
func Golden(t testing.TB, name string, got []byte) {
	t.Helper()
	GoldenAt(t, filepath.Join("testdata", name), got)
}

// GoldenAt compares got with the file at path, which -update rewrites.
func GoldenAt(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file; if the change is intended, run go test -update\ngot:\n%s", path, got)
	}
}

// GoldenBlock compares got with the part of the file at path between the
// lines <!-- name:begin --> and <!-- name:end -->, which -update rewrites:
// a table in the docs that a test derives from the code.
func GoldenBlock(t testing.TB, path, name string, got []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	begin, end := []byte("<!-- "+name+":begin -->\n"), []byte("<!-- "+name+":end -->")
	i, j := bytes.Index(b, begin), bytes.Index(b, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no block between %q and %q", path, begin, end)
	}
	i += len(begin)
	if bytes.Equal(b[i:j], got) {
		return
	}
	if *update {
		out := append(append(append([]byte{}, b[:i]...), got...), b[j:]...)
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's %s block differs from what the code declares; if the change is intended, run go test -update\ngot:\n%s", path, name, got)
}
