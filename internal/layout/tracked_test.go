package layout

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxTrackedBytes is the size past which a tracked file is taken for build
// output or data that does not belong in git.
const maxTrackedBytes = 1 << 20

// largeAllowed are the kinds of tracked file that may pass maxTrackedBytes:
// generated code and lockfiles, which are committed on purpose.
var largeAllowed = []string{".pb.go", "package-lock.json", "go.sum"}

// TestNothingBuiltIsTracked fails on a tracked file over 1 MiB that is not
// of an allowed kind, and on a tracked executable that is not a script: a
// binary committed by accident is stale by the next commit and bloats every
// clone for ever.
func TestNothingBuiltIsTracked(t *testing.T) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	root := strings.TrimSpace(string(top))
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		path := filepath.Join(root, name)
		st, err := os.Lstat(path)
		if err != nil || !st.Mode().IsRegular() {
			continue // deleted in the work tree, or a link
		}
		if st.Size() > maxTrackedBytes && !allowedLarge(name) {
			t.Errorf("%s is tracked and has %d bytes: build output or data does not belong in git (untrack it and add it to .gitignore)", name, st.Size())
		}
		if isELF(path) {
			t.Errorf("%s is a tracked executable binary: build it, do not commit it", name)
		}
	}
}

func allowedLarge(name string) bool {
	for _, suffix := range largeAllowed {
		if strings.HasSuffix(name, suffix) {
			return true
		}
	}
	return false
}

func isELF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 4)
	n, _ := f.Read(head)
	return bytes.Equal(head[:n], []byte("\x7fELF"))
}
