package task

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/fake"
)

// TestEachContainerHasAUIDOfItsOwn checks the uids of containers: each in
// the range, none shared by two live containers, and pooled ones too.
func TestEachContainerHasAUIDOfItsOwn(t *testing.T) {
	rt := fake.New(untilKilled)
	s := pooled(t, rt, 2, nil)
	if err := s.PoolReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 3 {
		go s.Run(ctx, Request{Program: code("x")}, newRecorder())
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(rt.Running()) < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	seen := map[string]bool{}
	specs := rt.LiveSpecs()
	for _, spec := range specs {
		uid, gid := spec.IDs()
		if !s.cfg.UIDs.Contains(uid) || uid != gid || seen[spec.User] {
			t.Errorf("container %s runs as %s: want a uid of %s of its own", spec.ID, spec.User, s.cfg.UIDs)
		}
		seen[spec.User] = true
	}
	if len(specs) < 3 {
		t.Errorf("%d containers live for 3 runs", len(specs))
	}
}

func TestUIDRangeRefusesTheHostsIDs(t *testing.T) {
	etc := t.TempDir()
	files := map[string]string{
		"passwd": "root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\nsvc:x:2000005:2000005::/:/bin/false\n",
		"group":  "root:x:0:\nalice:x:1000:\n",
		"subuid": "alice:100000:65536\nbob:3000000:65536\n",
		"subgid": "alice:100000:65536\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		r    UIDRange
		want string
	}{
		{UIDRange{First: 2000000, Count: 100}, "svc"},
		{UIDRange{First: 3010000, Count: 100}, "bob"},
		{UIDRange{First: 170000, Count: 100}, ""},
		{DefaultUIDRange(), ""},
	} {
		err := tt.r.checkHostIDs(etc)
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("range %s: %v, want a refusal naming %q", tt.r, err, tt.want)
		}
	}
	if err := (UIDRange{First: 1000, Count: 100}).validate(); err == nil {
		t.Error("a range among the accounts' ids was accepted")
	}
}

// TestAStalledCallerDoesNotPinTheRun is the regression test of a caller
// that stops reading: its run still ends at its timeout, the slot is freed
// for the next run, and the caller is dropped after the stall timeout.
func TestAStalledCallerDoesNotPinTheRun(t *testing.T) {
	rt := fake.New(func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		for ctx.Err() == nil {
			spec.Stdout.Write([]byte(strings.Repeat("x", 4096)))
			time.Sleep(time.Millisecond)
		}
		return runtime.Exit{Code: 137}
	})
	s := newService(t, rt, func(c *Config) { c.MaxRunning, c.MaxQueued, c.StallTimeout = 1, 0, 500*time.Millisecond })
	stalled := &stalledRecorder{recorder: newRecorder(), release: make(chan struct{})}
	defer close(stalled.release)
	start := time.Now()
	_, err := s.Run(context.Background(), Request{Program: code("x"), Options: Options{Limits: limits.Limits{Timeout: 300 * time.Millisecond}}}, stalled)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("Run() = %v after %v, want the stalled caller dropped within the stall timeout", err, time.Since(start))
	}
	id := stalled.runID()
	run, err := s.Get(id)
	if err != nil || run.Result == nil || run.Result.Status != StatusTimeout {
		t.Fatalf("Get() = %+v, %v; want the run finished with TIMEOUT", run, err)
	}
	if res, err := s.Run(context.Background(), Request{Program: code("x"), Options: Options{Limits: limits.Limits{Timeout: 100 * time.Millisecond}}}, newRecorder()); err != nil || res.Status != StatusTimeout {
		t.Fatalf("the next run in the only slot: %+v, %v", res, err)
	}
}

// stalledRecorder takes the Started event, then blocks on output.
type stalledRecorder struct {
	*recorder
	release chan struct{}
}

func (s *stalledRecorder) Output(Stream, []byte) error {
	<-s.release
	return errors.New("gone")
}

func (s *stalledRecorder) runID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started[0].RunID
}
