package task

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/run"
)

// waitQueued waits until n runs wait in a's queue.
func waitQueued(t *testing.T, a *admission, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a.mu.Lock()
		q := a.queued
		a.mu.Unlock()
		if q == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d runs queued, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAdmissionTakesCallersInTurn: with one slot, a caller who queued 200
// runs before another queued one gets one grant before the other's.
func TestAdmissionTakesCallersInTurn(t *testing.T) {
	a := newAdmission(1, 500)
	ctx := context.Background()
	hold, err := a.acquire(ctx, "flood", callerQuota{})
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		caller  string
		release func(time.Duration)
	}
	granted := make(chan grant)
	wait := func(caller string) {
		rel, err := a.acquire(ctx, caller, callerQuota{})
		if err != nil {
			t.Error(err)
			return
		}
		granted <- grant{caller, rel}
	}
	for range 200 {
		go wait("flood")
	}
	waitQueued(t, a, 200)
	go wait("single")
	waitQueued(t, a, 201)
	hold(0)
	var order []string
	for len(order) < 201 {
		g := <-granted
		order = append(order, g.caller)
		g.release(0)
	}
	if i := slices.Index(order, "single"); i > 1 {
		t.Fatalf("the single run was granted a slot after %d of the flood's", i)
	}
	if a.running != 0 || a.queued != 0 || len(a.turns) != 0 || len(a.waiting) != 0 {
		t.Fatalf("left: %d running, %d queued, turns %q", a.running, a.queued, a.turns)
	}
}

// TestAdmissionForgetsAWaiterThatGaveUp: a queued run whose caller goes
// leaves the queue and the round, and a grant skips it.
func TestAdmissionForgetsAWaiterThatGaveUp(t *testing.T) {
	a := newAdmission(1, 10)
	hold, _ := a.acquire(context.Background(), "a", callerQuota{})
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() { _, err := a.acquire(ctx, "b", callerQuota{}); gaveUp <- err }()
	waitQueued(t, a, 1)
	got := make(chan func(time.Duration), 1)
	go func() {
		rel, err := a.acquire(context.Background(), "c", callerQuota{})
		if err != nil {
			t.Error(err)
		}
		got <- rel
	}()
	waitQueued(t, a, 2)
	cancel()
	if err := <-gaveUp; err == nil {
		t.Fatal("a cancelled wait was granted")
	}
	waitQueued(t, a, 1)
	hold(0)
	(<-got)(0)
	if a.running != 0 || a.queued != 0 || len(a.turns) != 0 {
		t.Fatalf("left: %d running, %d queued, turns %q", a.running, a.queued, a.turns)
	}
}

// TestFairnessUnderAFlood: through the service, one tenant floods 200 runs
// and another asks for one; the one starts after at most one more of the
// flood's, not after 200.
func TestFairnessUnderAFlood(t *testing.T) {
	gate := make(chan struct{})
	var mu sync.Mutex
	var starts []string
	rt := fake.New(func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		name := spec.Argv[len(spec.Argv)-1]
		mu.Lock()
		starts = append(starts, name)
		mu.Unlock()
		if name == "flood-0" {
			<-gate
		}
		return runtime.Exit{}
	})
	s := newService(t, rt, func(c *Config) { c.MaxRunning, c.MaxQueued = 1, 300 })
	rn := func(tenant, name string, wg *sync.WaitGroup) {
		defer wg.Done()
		ctx := access.WithCaller(context.Background(), access.Caller{Name: tenant})
		if res, err := s.Run(ctx, run.Request{Command: &run.Command{Argv: []string{"echo", name}}}, newRecorder()); err != nil || res.Status != run.StatusOK {
			t.Errorf("%s: %s %v", name, res.Status, err)
		}
	}
	var wg sync.WaitGroup
	wg.Add(201)
	go rn("flood", "flood-0", &wg)
	for {
		mu.Lock()
		n := len(starts)
		mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	for i := 1; i < 200; i++ {
		go rn("flood", fmt.Sprintf("flood-%d", i), &wg)
	}
	waitQueued(t, s.admission, 199)
	go rn("single", "single-0", &wg)
	waitQueued(t, s.admission, 200)
	close(gate)
	wg.Wait()
	if i := slices.Index(starts, "single-0"); i < 0 || i > 2 {
		t.Fatalf("the single run started %dth, after %q", i+1, strings.Join(starts[:min(i, 5)], " "))
	}
}

// TestRetryHintFollowsTheRuns: a refusal's retry hint comes from how
// long runs last and how long the running ones have run, and grows with
// the waiters ahead. The fourth review saw three waiters behind 4 s runs
// each told 1.4 s: the mean had moved an eighth of the way from its 1 s
// default.
func TestRetryHintFollowsTheRuns(t *testing.T) {
	a := newAdmission(2, 2)
	ctx := context.Background()
	// One 4 s run ends: the mean is 4 s, not 1.4 s.
	release, err := a.acquire(ctx, "a", callerQuota{})
	if err != nil {
		t.Fatal(err)
	}
	release(4 * time.Second)
	// Two runs hold the slots, 1 s in (their start set back by hand).
	var releases []func(time.Duration)
	for range 2 {
		r, err := a.acquire(ctx, "a", callerQuota{})
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, r)
	}
	defer func() {
		for _, r := range releases {
			r(4 * time.Second)
		}
	}()
	now := time.Now()
	a.mu.Lock()
	for w, h := range a.holders {
		h.since = now.Add(-time.Second)
		a.holders[w] = h
	}
	hints := []time.Duration{a.retryAfter(now, 0, 2, ""), a.retryAfter(now, 1, 2, ""), a.retryAfter(now, 2, 2, ""), a.retryAfter(now, 4, 2, "")}
	// A run that outlasted the mean makes runs longer than it: 6 s in,
	// it is taken to end soon (a tenth of 6 s) and the next to last 6 s.
	for w, h := range a.holders {
		h.since = now.Add(-6 * time.Second)
		a.holders[w] = h
		break
	}
	late := a.retryAfter(now, 1, 2, "")
	a.mu.Unlock()
	if want := []time.Duration{3 * time.Second, 3 * time.Second, 7 * time.Second, 11 * time.Second}; !slices.Equal(hints, want) {
		t.Errorf("hints behind 0, 1, 2 and 4 waiters: %v, want %v", hints, want)
	}
	if late != 5*time.Second {
		t.Errorf("behind a run 6 s in and one 1 s in, one waiter ahead: %v, want 5s (the other's end)", late)
	}
}
