package task

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/run"
)

// TestIdempotencyKey: a retry of a keyed request gets the first call's run,
// live or ended, and never a second container; another request with the
// key is refused by name; a caller that drops does not stop the run.
func TestIdempotencyKey(t *testing.T) {
	var containers atomic.Int32
	gate := make(chan struct{})
	rt := fake.New(func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		containers.Add(1)
		io.WriteString(spec.Stdout, "first half\n")
		select {
		case <-gate:
		case <-ctx.Done():
			return runtime.Exit{Code: 137}
		}
		io.WriteString(spec.Stdout, "second half\n")
		return runtime.Exit{}
	})
	s := newService(t, rt, nil, withStore(t))
	ctx := access.WithCaller(context.Background(), access.Caller{Name: "team-a"})
	req := run.Request{Command: &run.Command{Argv: []string{"job"}}, Options: run.Options{IdempotencyKey: "job-42"}}

	// The first caller leaves mid-run, as a dropped connection would.
	first := newRecorder()
	leave, dropped := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() { _, err := s.Run(leave, req, first); left <- err }()
	for first.text(run.Stdout) == "" {
		time.Sleep(time.Millisecond)
	}
	dropped()
	if err := <-left; err == nil {
		t.Fatal("the dropped call returned no error")
	}
	// The retry follows the same run, which went on.
	retry := newRecorder()
	got := make(chan run.Result, 1)
	go func() {
		res, err := s.Run(ctx, req, retry)
		if err != nil {
			t.Error(err)
		}
		got <- res
	}()
	time.Sleep(20 * time.Millisecond)
	close(gate)
	res := <-got
	if res.Status != run.StatusOK || res.RunID != first.runID() || retry.text(run.Stdout) != "first half\nsecond half\n" {
		t.Fatalf("the retry: %s run %s (first %s), output %q", res.Status, res.RunID, first.runID(), retry.text(run.Stdout))
	}
	// After the end: the same run, its output from the bundle.
	again := newRecorder()
	res2, err := s.Run(ctx, req, again)
	if err != nil || res2.RunID != res.RunID || res2.BundleDigest != res.BundleDigest || again.text(run.Stdout) != "first half\nsecond half\n" {
		t.Fatalf("a retry after the end: %+v %v %q", res2, err, again.text(run.Stdout))
	}
	if n := containers.Load(); n != 1 {
		t.Fatalf("%d containers for one key", n)
	}
	other := req
	other.Command = &run.Command{Argv: []string{"another", "job"}}
	if _, err := s.Run(ctx, other, newRecorder()); !errdefs.IsAlreadyExists(err) || !strings.Contains(err.Error(), `"job-42"`) {
		t.Fatalf("another request with the key: %v", err)
	}
	// Keys are the caller's: another tenant's same key is its own run.
	if res, err := s.Run(access.WithCaller(context.Background(), access.Caller{Name: "team-b"}), req, newRecorder()); err != nil || res.RunID == res2.RunID {
		t.Fatalf("team-b's run with team-a's key: %+v %v", res, err)
	}
	for _, bad := range []string{"has space", strings.Repeat("k", 129)} {
		r := req
		r.Options.IdempotencyKey = bad
		if _, err := s.Run(ctx, r, newRecorder()); !errdefs.IsInvalidArgument(err) {
			t.Errorf("key %q: %v", bad, err)
		}
	}
}

// TestIdempotencyKeyAfterACrash: a keyed run its daemon did not see end is
// LOST for the next daemon on the same state, not run again; one that
// ended is reported as it ended.
func TestIdempotencyKeyAfterACrash(t *testing.T) {
	state := t.TempDir()
	withState := func(c *Config) { c.StateDir = state }
	ended := run.Request{Command: &run.Command{Argv: []string{"quick"}}, Options: run.Options{IdempotencyKey: "quick"}}
	cut := run.Request{Command: &run.Command{Argv: []string{"slow"}}, Options: run.Options{IdempotencyKey: "slow"}}
	rt := fake.New(func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		if spec.Argv[0] == "slow" {
			<-ctx.Done()
			return runtime.Exit{Code: 137}
		}
		return runtime.Exit{}
	})
	s := newService(t, rt, withState)
	ctx := access.WithCaller(context.Background(), access.Caller{Name: "team-a"})
	first, err := s.Run(ctx, ended, newRecorder())
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	go s.Run(ctx, cut, rec)
	for rec.runID() == "" {
		time.Sleep(time.Millisecond)
	}
	// A second daemon on the same state, as after a kill -9 of the first.
	rt2 := fake.New(func(context.Context, runtime.Spec) runtime.Exit {
		t.Error("a keyed run ran again after the crash")
		return runtime.Exit{}
	})
	s2 := newService(t, rt2, withState)
	res, err := s2.Run(ctx, cut, newRecorder())
	if err != nil || res.Status != run.StatusLost || res.RunID != rec.runID() {
		t.Fatalf("the cut run: %+v %v, want LOST run %s", res, err, rec.runID())
	}
	if rn, err := s2.Get(ctx, rec.runID()); err != nil || rn.Result.Status != run.StatusLost {
		t.Fatalf("GetRun of the cut run: %+v %v", rn, err)
	}
	res, err = s2.Run(ctx, ended, newRecorder())
	if err != nil || res.Status != run.StatusOK || res.RunID != first.RunID {
		t.Fatalf("the ended run after the crash: %+v %v", res, err)
	}
	entries, _ := os.ReadDir(filepath.Join(state, "keys", s2.cfg.Instance))
	if len(entries) != 2 {
		t.Fatalf("%d key files, want 2", len(entries))
	}
}

// TestDetachedRetryOfALostRunAnswersItsResult: a detached keyed run cut
// off by a crash is LOST; its detached retry answered an error of code
// Unknown ("the run ended before it started"), where AttachRun answered
// the LOST result. Detach now gives the result.
func TestDetachedRetryOfALostRunAnswersItsResult(t *testing.T) {
	state := t.TempDir()
	withState := func(c *Config) { c.StateDir = state }
	cut := run.Request{Command: &run.Command{Argv: []string{"slow"}}, Options: run.Options{IdempotencyKey: "slow"}}
	rt := fake.New(func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		<-ctx.Done()
		return runtime.Exit{Code: 137}
	})
	s := newService(t, rt, withState)
	ctx := access.WithCaller(context.Background(), access.Caller{Name: "team-a"})
	d, err := s.Detach(ctx, cut)
	if err != nil || d.Started.RunID == "" || d.Ended != nil {
		t.Fatalf("Detach() = %+v, %v; want a started run", d, err)
	}
	s2 := newService(t, fake.New(func(context.Context, runtime.Spec) runtime.Exit {
		t.Error("a keyed run ran again after the crash")
		return runtime.Exit{}
	}), withState)
	d, err = s2.Detach(ctx, cut)
	if err != nil || d.Ended == nil || d.Ended.Status != run.StatusLost || d.Ended.RunID == "" {
		t.Fatalf("the detached retry: %+v, %v; want the LOST result", d, err)
	}
}
