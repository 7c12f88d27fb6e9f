package task

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
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
	// A run that comes once the daemon stops is refused with the same
	// hint, so that the client retries it elsewhere.
	_, err = s2.Run(ctx, run.Request{Command: &run.Command{Argv: []string{"late"}}}, newRecorder())
	if !errors.As(err, &draining) || draining.RetryAfter <= 0 {
		t.Fatalf("a new run once the daemon stopped: %v, want a DrainingError", err)
	}
}

// heldImage holds the image lookup of the next run to get its container,
// once armed, until release is closed.
type heldImage struct {
	*fake.Runtime
	armed    *atomic.Bool
	starting chan struct{}
	release  chan struct{}
}

func (h heldImage) Image(ctx context.Context, ref string) (runtime.Image, error) {
	if h.armed.CompareAndSwap(true, false) {
		close(h.starting)
		<-h.release
	}
	return h.Runtime.Image(ctx, ref)
}

// TestDrainWaitsForRunsTakenButNotYetRunning: a run taken before the drain
// began but not yet running (queued behind the daemon's one slot, then
// looking up its image) is waited for like a running one: a drain that
// counted only running runs ended in that moment.
func TestDrainWaitsForRunsTakenButNotYetRunning(t *testing.T) {
	gate := make(chan struct{})
	rt := heldImage{fake.New(func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		if spec.Argv[0] == "first" {
			<-gate
		}
		return runtime.Exit{}
	}), new(atomic.Bool), make(chan struct{}), make(chan struct{})}
	s := newService(t, rt, func(c *Config) { c.MaxRunning = 1 })
	// Registered after the service's: on a failure the held run goes on,
	// and Shutdown does not wait for it forever.
	release := sync.OnceFunc(func() { close(rt.release) })
	t.Cleanup(release)
	ctx := context.Background()
	first := newRecorder()
	ran := make(chan run.Result, 2)
	go func() {
		res, _ := s.Run(ctx, run.Request{Command: &run.Command{Argv: []string{"first"}}}, first)
		ran <- res
	}()
	for first.runID() == "" {
		time.Sleep(time.Millisecond)
	}
	rt.armed.Store(true)
	go func() {
		res, _ := s.Run(ctx, run.Request{Command: &run.Command{Argv: []string{"second"}}}, newRecorder())
		ran <- res
	}()
	for queued := 0; queued == 0; {
		time.Sleep(time.Millisecond)
		s.admission.mu.Lock()
		queued = s.admission.queued
		s.admission.mu.Unlock()
	}
	drained := make(chan error, 1)
	go func() { drained <- s.Drain(ctx) }()
	close(gate)
	<-rt.starting
	select {
	case err := <-drained:
		t.Fatalf("Drain returned (%v) while a run it had taken was getting its container", err)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	if err := <-drained; err != nil {
		t.Fatalf("Drain() = %v", err)
	}
	for range 2 {
		if res := <-ran; res.Status != run.StatusOK {
			t.Fatalf("a run taken before the drain: %s (%s), want it to end on its own", res.Status, res.Message)
		}
	}
}
