package testutil

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

var (
	builtMu sync.Mutex
	built   = map[string]string{}
)

// BuildStatic builds the main package pkg of this module (such as
// "./cmd/sandboxd-init"), static, once per test binary, and returns the
// binary's path. Builds go to one folder of the user's in the machine's
// temp folder, each replacing the last by a rename, so that none piles up
// and a container that bound an earlier one keeps it.
func BuildStatic(t testing.TB, pkg string) string {
	t.Helper()
	builtMu.Lock()
	defer builtMu.Unlock()
	if p, ok := built[pkg]; ok {
		return p
	}
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("find the module: %v", err)
	}
	dir, err := binDir()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, filepath.Base(pkg))
	tmp := fmt.Sprintf("%s.%d.tmp", out, os.Getpid())
	build := exec.Command("go", "build", "-o", tmp, pkg)
	build.Dir = strings.TrimSpace(string(root))
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := build.CombinedOutput(); err != nil {
		os.Remove(tmp)
		t.Fatalf("build %s: %v\n%s", pkg, err, msg)
	}
	if err := os.Rename(tmp, out); err != nil {
		t.Fatal(err)
	}
	built[pkg] = out
	return out
}

// binDir is the user's folder of built test binaries: one per uid, since
// another user's cannot be written, and refused when someone else owns it
// or may write it, since the binaries it holds run as root in containers.
func binDir() (string, error) {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("sandboxd-test-bin-%d", os.Getuid()))
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !st.IsDir() || !ok || int(sys.Uid) != os.Getuid() || st.Mode().Perm()&0o022 != 0 {
		return "", fmt.Errorf("%s is not a folder of uid %d's that only it may write: remove it", dir, os.Getuid())
	}
	return dir, nil
}

// BuildInit builds sandboxd's container init (cmd/sandboxd-init).
func BuildInit(t testing.TB) string {
	t.Helper()
	return BuildStatic(t, "./cmd/sandboxd-init")
}
