package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// TestSocketGroupNone: --socket-group none leaves the socket to root
// (mode 0600) without looking up a group called "none" and warning that
// it does not exist.
func TestSocketGroupNone(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the socket is chowned to root: needs root")
	}
	var logs bytes.Buffer
	path := filepath.Join(t.TempDir(), "s.sock")
	lis, err := listenUnix(path, socketGroupNone, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 || logs.Len() > 0 {
		t.Fatalf("mode %v, logs %q: want 0600 and no warning", st.Mode().Perm(), logs.String())
	}
}
