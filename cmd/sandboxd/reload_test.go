package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/artifacts/provenance"
)

// TestWatchRunsAReloadWhenItsFileChanges: a reload runs when one of its
// files changes, whether written in place or renamed over, and not while
// nothing changes; one that failed runs again at the next change.
func TestWatchRunsAReloadWhenItsFileChanges(t *testing.T) {
	dir := t.TempDir()
	cert, other := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "unrelated")
	for _, f := range []string{cert, other} {
		os.WriteFile(f, []byte("v1"), 0o600)
	}
	var runs, fail atomic.Int32
	r := reload{what: "TLS certificate", files: []string{cert}, do: func(context.Context) ([]any, error) {
		runs.Add(1)
		if fail.Load() == 1 {
			return nil, errors.New("the key does not match")
		}
		return nil, nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go (&reloader{rs: []reload{r}, log: slog.New(slog.DiscardHandler)}).watch(ctx, 5*time.Millisecond)
	waitRuns := func(want int32) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for runs.Load() < want && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // ten more ticks: no run too many
		if got := runs.Load(); got != want {
			t.Fatalf("%d runs, want %d", got, want)
		}
	}
	// Renamed over, as a Secret's files are: a new inode, whole at once.
	replace := func(path, content string) {
		tmp := path + ".new"
		os.WriteFile(tmp, []byte(content), 0o600)
		os.Rename(tmp, path)
	}
	waitRuns(0)
	replace(other, "v2")
	waitRuns(0)
	replace(cert, "v2")
	waitRuns(1)
	fail.Store(1)
	replace(cert, "v3")
	waitRuns(2)
	waitRuns(2) // not retried while nothing changes
	fail.Store(0)
	replace(cert, "v4")
	waitRuns(3)
	// Written in place: read once it holds still (a busy machine may
	// catch it half-written, and then again).
	os.WriteFile(cert, []byte("v5, longer"), 0o600)
	deadline := time.Now().Add(10 * time.Second)
	for runs.Load() < 4 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if runs.Load() < 4 {
		t.Fatal("a file written in place was not read again")
	}
}

// TestSigningKeyReloadNamesTheNewKey: after sandboxd key rotate, the
// reload's log line names the key that signs from then on (the fourth
// review saw the old key's id there, while signing switched).
func TestSigningKeyReloadNamesTheNewKey(t *testing.T) {
	dir := t.TempDir()
	ring, err := provenance.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	old := ring.KeyID()
	rotated, err := provenance.Open(dir) // as sandboxd key rotate does, in its own process
	if err != nil {
		t.Fatal(err)
	}
	if err := rotated.Rotate(); err != nil {
		t.Fatal(err)
	}
	rs := reloads(Config{}, nil, nil, false, &listeners{}, ring, slog.New(slog.DiscardHandler))
	attrs, err := rs[0].do(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(attrs) != 2 || attrs[1] != rotated.KeyID() || attrs[1] == old || ring.KeyID() != rotated.KeyID() {
		t.Fatalf("the %s reload says %v; want the new key %s (the old was %s)", rs[0].what, attrs, rotated.KeyID(), old)
	}
}
