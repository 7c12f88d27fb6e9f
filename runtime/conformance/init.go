package conformance

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	initOnce sync.Once
	initPath string
	initErr  error
)

// BuildInit builds cmd/sandboxd-init, static, once per test binary, and
// returns its path.
func BuildInit(t testing.TB) string {
	t.Helper()
	initOnce.Do(func() {
		var root []byte
		if root, initErr = exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output(); initErr != nil {
			return
		}
		dir, err := os.MkdirTemp("", "sandboxd-init-")
		if err != nil {
			initErr = err
			return
		}
		initPath = filepath.Join(dir, "sandboxd-init")
		build := exec.Command("go", "build", "-o", initPath, "./cmd/sandboxd-init")
		build.Dir = strings.TrimSpace(string(root))
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			initErr = &buildError{err: err, out: string(out)}
		}
	})
	if initErr != nil {
		t.Fatalf("build sandboxd-init: %v", initErr)
	}
	return initPath
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }
