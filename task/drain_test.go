package task

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
)

// TestDrainLetsRunsEndAndRefusesNewOnes: while draining, a new run is
// refused as unavailable with a retry hint, the running one ends on its
// own, and Drain returns when it has; a run that does not end keeps Drain
// to its deadline.
func TestDrainLetsRunsEndAndRefusesNewOnes(t *testing.T) {
	gate := make(chan struct{})
	s := newService(t, fake.New(func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		if spec.Argv[0] == "forever" {
			<-ctx.Done()
			return runtime.Exit{Code: 137}
		}
		<-gate
		return runtime.Exit{}
	}), nil)
	ctx := context.Background()
	ran := make(chan run.Result, 1)
	rec := newRecorder()
	go func() {
		res, _ := s.Run(ctx, run.Request{Command: &run.Command{Argv: []string{"job"}}}, rec)
		ran <- res
	}()
	for rec.runID() == "" {
		time.Sleep(time.Millisecond)
	}
	drained := make(chan error, 1)
	go func() { drained <- s.Drain(ctx) }()
	time.Sleep(20 * time.Millisecond)
	_, err := s.Run(ctx, run.Request{Command: &run.Command{Argv: []string{"new"}}}, newRecorder())
	var draining *DrainingError
	if !errors.As(err, &draining) || !errdefs.IsUnavailable(err) || draining.RetryAfter <= 0 {
		t.Fatalf("a new run while draining: %v", err)
	}
	if _, err := s.CreateSession(ctx, session.Request{}); err == nil {
		t.Fatal("a new session while draining was accepted")
	}
	select {
	case err := <-drained:
		t.Fatalf("Drain returned while a run ran: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(gate)
	if res := <-ran; res.Status != run.StatusOK {
		t.Fatalf("the running run: %s, want it to end on its own", res.Status)
	}
	if err := <-drained; err != nil {
		t.Fatalf("Drain() = %v", err)
	}

	s2 := newService(t, fake.New(untilKilled), nil)
	rec = newRecorder()
	go s2.Run(ctx, run.Request{Command: &run.Command{Argv: []string{"forever"}}}, rec)
	for rec.runID() == "" {
		time.Sleep(time.Millisecond)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := s2.Drain(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Drain() past its deadline = %v", err)
	}
	s2.Shutdown(ctx)
}
