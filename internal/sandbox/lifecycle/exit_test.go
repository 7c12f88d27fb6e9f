package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/sandbox/cgroup"
	"github.com/sandboxd/sandboxd/internal/sandbox/launch"
)

// cgroupWithOOMKills makes a cgroup v1 memory hierarchy whose cgroup
// /sandboxd/c has a peak of 1 MiB and oomKills OOM kills in a child.
func cgroupWithOOMKills(t *testing.T, oomKills string) *cgroup.Hierarchy {
	return cgroupAt(t, "sandboxd/c", oomKills)
}

// cgroupAt makes a cgroup v1 memory hierarchy whose cgroup at path has a
// peak of 1 MiB and oomKills OOM kills in a child.
func cgroupAt(t *testing.T, path, oomKills string) *cgroup.Hierarchy {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"memory/" + path + "/memory.max_usage_in_bytes": "1048576\n",
		"memory/" + path + "/memory.oom_control":        "oom_kill 0\n",
		"memory/" + path + "/task/memory.oom_control":   "oom_kill " + oomKills + "\n",
	}
	for p, content := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h, err := cgroup.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	return &h
}

// errEngine stands for the backend's word.
var errEngine = errors.New("the engine's word")

func TestAwaitExitTakesTheReportUnlessOnlyTheEngineCanTell(t *testing.T) {
	tests := []struct {
		name     string
		code     int
		oomKills string
		noCgroup bool
		reported bool
	}{
		{name: "exit code", code: 3, oomKills: "0", reported: true},
		{name: "signal other than SIGKILL", code: 128 + 15, oomKills: "0", reported: true},
		{name: "SIGKILL", code: 128 + 9, oomKills: "0"},
		{name: "an OOM kill in the cgroup", code: 1, oomKills: "1"},
		{name: "no cgroup", code: 0, oomKills: "0", noCgroup: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			report, err := launch.NewReport(&bytes.Buffer{}, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			line := launch.ReportLine(report.Token(), tt.code)
			report.Stdout().Write(line)
			report.Stderr().Write(line)
			h := cgroupWithOOMKills(t, tt.oomKills)
			if tt.noCgroup {
				h = nil
			}
			// The report is weighed first. Without a cgroup the backend
			// answers well after it; with one, the init holds the
			// container after its report, and the backend answers only
			// once it is released.
			engine := make(chan error, 1)
			answer := func() { time.AfterFunc(100*time.Millisecond, func() { engine <- errEngine }) }
			if tt.noCgroup {
				answer()
			}
			released := 0
			release := func(context.Context) {
				released++
				answer()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			launched := time.Now().Add(-time.Second)
			exit, err := awaitExit(ctx, engine, report, launched, h, "/sandboxd/c", release)
			if want := map[bool]int{true: 1}[!tt.reported && !tt.noCgroup]; released != want {
				t.Fatalf("the init was released %d times, want %d", released, want)
			}
			switch {
			case tt.reported && (err != nil || exit == nil || exit.Code != tt.code || exit.PeakMemoryBytes != 1<<20 || !exit.StartedAt.Equal(launched)):
				t.Fatalf("awaitExit() = %+v, %v; want the report's exit with code %d and the peak", exit, err, tt.code)
			case !tt.reported && (exit != nil || !errors.Is(err, errEngine)):
				t.Fatalf("awaitExit() = %+v, %v; want the engine's word", exit, err)
			}
		})
	}
}
