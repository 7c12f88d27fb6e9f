package cgroup

import (
	"os"
	"path/filepath"
	"testing"
)

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
			root := t.TempDir()
			for p, c := range tt.layout {
				write(t, filepath.Join(root, p), c)
			}
			h, err := Open(root)
			if err != nil {
				t.Fatal(err)
			}
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
