//go:build integration

package direct_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/sandbox/cgroup"
	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/internal/testutil/backends"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/direct"
	"github.com/sandboxd/sandboxd/runtime/runtimetest"
)

func TestContract(t *testing.T) {
	e := backends.Direct(t)
	for _, oci := range []string{"runc", "crun", "runsc"} {
		t.Run(oci, func(t *testing.T) {
			runtimetest.Run(t, runtimetest.Target{Runtime: e.Runtime, Image: "sandboxd/shell", OCIRuntime: oci,
				Program: testutil.BuildStatic(t, "./internal/testprog/cmd/testprog"), Leftovers: e.Leftovers,
				Checkpoints: oci == runtime.RunscName})
		})
	}
}

func TestImageFollowsAMovedName(t *testing.T) {
	backends.FollowsAMovedName(t, backends.Direct(t))
}

func TestRuncIsCurrent(t *testing.T) { backends.RuncIsCurrent(t, backends.Direct(t)) }

// TestStateFolderIsATmpfs: a state folder on a disk gets a tmpfs of its
// own for as long as the backend lives, and Close leaves nothing of it;
// a folder that already holds containers (a crash's, before the tmpfs)
// stays visible to Reap.
func TestStateFolderIsATmpfs(t *testing.T) {
	testutil.RequireRoot(t)
	parent, err := os.MkdirTemp("/var/tmp", "sandboxd-direct-state-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unix.Unmount(filepath.Join(parent, "state"), unix.MNT_DETACH)
		os.RemoveAll(parent)
	})
	var disk unix.Statfs_t
	if err := unix.Statfs(parent, &disk); err != nil || disk.Type == unix.TMPFS_MAGIC {
		t.Skipf("/var/tmp is a tmpfs here (%v): nothing to mount", err)
	}
	open := func(dir string) *direct.Runtime {
		rt, err := direct.New(direct.Options{StateDir: dir, InitPath: testutil.BuildInit(t), CgroupRoot: "/sys/fs/cgroup",
			CgroupParent: cgroup.InstanceParent(fmt.Sprintf("direct-state-%d", os.Getpid()))})
		if err != nil {
			testutil.SkipOrFail(t, "no direct backend: %v", err)
		}
		return rt
	}
	fsType := func(dir string) int64 {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		return st.Type
	}
	state := filepath.Join(parent, "state")
	rt := open(state)
	if got := fsType(state); got != unix.TMPFS_MAGIC {
		t.Errorf("the state folder's file system is %#x, want a tmpfs", got)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(state); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after Close the state folder is still there: %v", err)
	}

	left := filepath.Join(state, "containers", "sandboxd-left-by-a-crash")
	if err := os.MkdirAll(left, 0o700); err != nil {
		t.Fatal(err)
	}
	rt = open(state)
	defer rt.Close()
	if got := fsType(state); got == unix.TMPFS_MAGIC {
		t.Errorf("a tmpfs was mounted over a state folder holding a container")
	}
	if _, err := os.Stat(left); err != nil {
		t.Errorf("the container's folder is hidden: %v", err)
	}
}

// TestStartCutAnywhereRemovesCleanly cuts starts at random moments of
// their course, many times, and removes each: the container process the
// killed run process left setting up the root file system must not be
// writing in the container's folder while it goes (a pool's refill cut by
// its close once left a folder whose upper layer was not empty).
func TestStartCutAnywhereRemovesCleanly(t *testing.T) {
	const cuts = 30
	e := backends.Direct(t)
	ctx := context.Background()
	img, err := e.Runtime.Image(ctx, "sandboxd/shell")
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"io.sandboxd.direct-test.cut": strconv.Itoa(os.Getpid())}
	t.Cleanup(func() { e.Runtime.Reap(ctx, labels) })
	for _, oci := range []string{"runc", "crun"} {
		t.Run(oci, func(t *testing.T) {
			spec := func(id string) runtime.Spec {
				return runtime.Spec{ID: "cut-" + oci + "-" + id, Image: img.ID, Runtime: oci, Argv: []string{"true"},
					WorkingDir: "/", User: "65534:65534", Labels: labels, Stdout: io.Discard, Stderr: io.Discard,
					Resources: runtime.Resources{MemoryBytes: 64 << 20, CPUMillis: 500, Pids: 16, NoFile: 64}}
			}
			began := time.Now()
			c, err := e.Runtime.Start(ctx, spec("uncut"))
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(began)
			if err := c.Remove(ctx); err != nil {
				t.Fatal(err)
			}
			cut := 0
			for i := range cuts {
				startCtx, cancel := context.WithTimeout(ctx, time.Duration(rand.Int64N(int64(took))))
				c, err := e.Runtime.Start(startCtx, spec(strconv.Itoa(i)))
				cancel()
				if err == nil {
					err = c.Remove(ctx)
				} else {
					cut++
				}
				if left, lerr := e.Leftovers(ctx, labels); err != nil && !errors.Is(err, context.DeadlineExceeded) || lerr != nil || len(left) > 0 {
					t.Fatalf("start %d (of %v): %v; left behind: %v %v", i, took, err, left, lerr)
				}
			}
			t.Logf("%d of %d starts cut within the %v an uncut one took, nothing left behind", cut, cuts, took.Round(time.Millisecond))
		})
	}
}
