package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testutil"
)

// openLayout writes layout's files below a fresh folder and opens it as
// a cgroup file system.
func openLayout(t *testing.T, layout map[string]string) (string, Hierarchy) {
	t.Helper()
	root := t.TempDir()
	for p, c := range layout {
		write(t, filepath.Join(root, p), c)
	}
	h, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	return root, h
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestMemoryCounters(t *testing.T) {
	tests := []struct {
		name    string
		layout  map[string]string
		unified bool
	}{
		{name: "v1", layout: map[string]string{
			"memory/sandboxd/a/memory.max_usage_in_bytes": "67371008\n",
			"memory/sandboxd/a/memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
			"memory/sandboxd/a/ctr/memory.oom_control":    "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
			"pids/sandboxd/a/pids.max":                    "max",
		}},
		{name: "v2", layout: map[string]string{
			"cgroup.controllers":           "memory pids",
			"sandboxd/a/memory.peak":       "67371008\n",
			"sandboxd/a/memory.events":     "low 0\nhigh 0\nmax 5\noom 2\noom_kill 2\noom_group_kill 0\n",
			"sandboxd/a/ctr/memory.events": "low 0\nhigh 0\nmax 5\noom 2\noom_kill 2\noom_group_kill 0\n",
		}, unified: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, h := openLayout(t, tt.layout)
			if h.Unified() != tt.unified {
				t.Fatalf("Unified() = %v", h.Unified())
			}
			peak, err := h.PeakMemory("/sandboxd/a")
			if err != nil || peak != 67371008 {
				t.Fatalf("PeakMemory() = %d, %v", peak, err)
			}
			if n, err := h.OOMKills("/sandboxd/a"); err != nil || n != 2 {
				t.Fatalf("OOMKills() = %d, %v", n, err)
			}
			kids, err := h.Children("/sandboxd")
			if err != nil || len(kids) != 1 || kids[0] != "a" {
				t.Fatalf("Children() = %v, %v", kids, err)
			}
			if _, err := h.PeakMemory("/sandboxd/missing"); err == nil {
				t.Fatal("PeakMemory() of a missing cgroup succeeded")
			}
		})
	}
}

func TestOpenRefusesNonCgroupFolder(t *testing.T) {
	if _, err := Open(t.TempDir()); err == nil {
		t.Fatal("Open() of an empty folder succeeded")
	}
}

func TestRemoveEmptyTree(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"memory/sandboxd/a/child", "pids/sandboxd/a"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.Symlink("memory", filepath.Join(root, "memory,alias"))
	h, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Remove("/sandboxd/a"); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"memory/sandboxd/a", "pids/sandboxd/a"} {
		if _, err := os.Stat(filepath.Join(root, d)); !os.IsNotExist(err) {
			t.Errorf("%s still exists", d)
		}
	}
	if err := h.Remove("/sandboxd/a"); err != nil {
		t.Fatalf("removing twice: %v", err)
	}
}

// TestRemoveUnusedLeavesACgroupInUse keeps a tree with a process in any
// controller, and removes one without.
func TestRemoveUnusedLeavesACgroupInUse(t *testing.T) {
	for _, unified := range []bool{false, true} {
		t.Run(map[bool]string{false: "v1", true: "v2"}[unified], func(t *testing.T) {
			root := t.TempDir()
			prefix := map[bool][]string{false: {"memory", "pids"}, true: {""}}[unified]
			if unified {
				os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("memory pids\n"), 0o644)
			}
			for _, c := range prefix {
				os.MkdirAll(filepath.Join(root, c, "sandboxd/busy/task"), 0o755)
				os.MkdirAll(filepath.Join(root, c, "sandboxd/idle/task"), 0o755)
			}
			// The process is in one controller only: the last one listed.
			last := prefix[len(prefix)-1]
			// A pid above any pid_max: nothing may be sent a signal.
			os.WriteFile(filepath.Join(root, last, "sandboxd/busy/task/cgroup.procs"), []byte("4194305\n"), 0o644)
			h, err := Open(root)
			if err != nil {
				t.Fatal(err)
			}
			if removed, err := h.RemoveUnused("/sandboxd/busy"); removed || err != nil {
				t.Fatalf("RemoveUnused(busy) = %v, %v; want false, nil", removed, err)
			}
			if removed, err := h.RemoveUnused("/sandboxd/idle"); !removed || err != nil {
				t.Fatalf("RemoveUnused(idle) = %v, %v; want true, nil", removed, err)
			}
			for _, c := range prefix {
				if _, err := os.Stat(filepath.Join(root, c, "sandboxd/busy/task")); err != nil {
					t.Errorf("%s: the busy cgroup is gone: %v", c, err)
				}
				if _, err := os.Stat(filepath.Join(root, c, "sandboxd/idle")); !os.IsNotExist(err) {
					t.Errorf("%s: the idle cgroup is still there", c)
				}
			}
		})
	}
}

// TestSetLimits writes a container's limits in each layout, in the files
// runc's update writes.
func TestSetLimits(t *testing.T) {
	l := Limits{MemoryBytes: 256 << 20, MemorySwapBytes: 256 << 20, CPUQuota: 50_000, CPUPeriod: 100_000, Pids: 76}
	for _, tt := range []struct {
		name   string
		layout map[string]string
		want   map[string]string
	}{
		{name: "v1", layout: map[string]string{
			"memory/s/c/memory.limit_in_bytes": "", "memory/s/c/memory.memsw.limit_in_bytes": "",
			"cpu/s/c/cpu.cfs_period_us": "", "cpu/s/c/cpu.cfs_quota_us": "", "pids/s/c/pids.max": "",
		}, want: map[string]string{
			"memory/s/c/memory.limit_in_bytes": "268435456", "memory/s/c/memory.memsw.limit_in_bytes": "268435456",
			"cpu/s/c/cpu.cfs_period_us": "100000", "cpu/s/c/cpu.cfs_quota_us": "50000", "pids/s/c/pids.max": "76",
		}},
		{name: "v1 without swap accounting", layout: map[string]string{
			"memory/s/c/memory.limit_in_bytes": "", "cpu/s/c/cpu.cfs_period_us": "", "cpu/s/c/cpu.cfs_quota_us": "", "pids/s/c/pids.max": "",
		}, want: map[string]string{"memory/s/c/memory.limit_in_bytes": "268435456", "pids/s/c/pids.max": "76"}},
		{name: "v2", layout: map[string]string{
			"cgroup.controllers": "memory pids cpu",
			"s/c/memory.max":     "", "s/c/memory.swap.max": "", "s/c/cpu.max": "", "s/c/pids.max": "",
		}, want: map[string]string{"s/c/memory.max": "268435456", "s/c/memory.swap.max": "0", "s/c/cpu.max": "50000 100000", "s/c/pids.max": "76"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root, h := openLayout(t, tt.layout)
			if err := h.SetLimits("/s/c", l); err != nil {
				t.Fatal(err)
			}
			for p, want := range tt.want {
				if b, _ := os.ReadFile(filepath.Join(root, p)); string(b) != want {
					t.Errorf("%s = %q, want %q", p, b, want)
				}
			}
		})
	}
	// A cgroup the runtime did not make is an error that names the file.
	if err := (Hierarchy{root: t.TempDir()}).SetLimits("/missing", l); err == nil || !strings.Contains(err.Error(), "memory.limit_in_bytes") {
		t.Errorf("SetLimits() of a missing cgroup: %v", err)
	}
}

// TestEmptyWaitsForTheKilled: Empty returns at once for a cgroup with no
// process or none at all, and names the cgroup when what it killed is
// still listed at the context's end (here a pid above any pid_max, which
// no signal reaches, stands for a process that does not die).
func TestEmptyWaitsForTheKilled(t *testing.T) {
	for _, unified := range []bool{false, true} {
		t.Run(map[bool]string{false: "v1", true: "v2"}[unified], func(t *testing.T) {
			prefix := map[bool]string{false: "memory/", true: ""}[unified]
			layout := map[string]string{
				prefix + "sandboxd/idle/task/cgroup.procs":  "",
				prefix + "sandboxd/stuck/task/cgroup.procs": "4194305\n",
			}
			if unified {
				layout["cgroup.controllers"] = "memory pids\n"
			} else {
				layout["pids/sandboxd/idle/cgroup.procs"] = ""
			}
			_, h := openLayout(t, layout)
			for _, p := range []string{"/sandboxd/idle", "/sandboxd/missing"} {
				if err := h.Empty(context.Background(), p); err != nil {
					t.Errorf("Empty(%s) = %v", p, err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			err := h.Empty(ctx, "/sandboxd/stuck")
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "/sandboxd/stuck") {
				t.Errorf("Empty(stuck) = %v, want the deadline's error naming the cgroup", err)
			}
		})
	}
}

// TestEmptyKillsARealProcess puts a process in a cgroup of the host's
// own file system and empties it: the process is killed, and Empty has
// returned only once the kernel no longer lists it.
func TestEmptyKillsARealProcess(t *testing.T) {
	testutil.RequireRoot(t)
	h, err := Open("/sys/fs/cgroup")
	if err != nil {
		testutil.SkipOrFail(t, "no cgroup file system: %v", err)
	}
	name := fmt.Sprintf("/sandboxd-test-empty-%d", os.Getpid())
	dir := filepath.Join("/sys/fs/cgroup", name)
	if !h.Unified() {
		dir = filepath.Join("/sys/fs/cgroup/memory", name)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Remove(name); err != nil {
			t.Errorf("remove the test's cgroup: %v", err)
		}
	})
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		cmd.Process.Kill()
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Empty(ctx, name); err != nil {
		t.Fatal(err)
	}
	if procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err != nil || len(procs) > 0 {
		t.Errorf("after Empty the cgroup lists %q (%v)", procs, err)
	}
	if err := <-waited; err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("the process ended with %v, want a kill", err)
	}
}

// TestOOMSeen: the v1 eventfd's counts, read while the cgroup is there or
// after it went (its removal signals once, after the folder has gone).
func TestOOMSeen(t *testing.T) {
	for _, tt := range []struct {
		events uint64
		there  bool
		want   bool
	}{
		{0, true, false},
		{1, true, true},   // an OOM while the container lives
		{1, false, false}, // the removal alone
		{2, false, true},  // an OOM read late, with the removal
		{3, false, true},
	} {
		if got := oomSeen(tt.events, tt.there); got != tt.want {
			t.Errorf("oomSeen(%d, %v) = %v, want %v", tt.events, tt.there, got, tt.want)
		}
	}
}
