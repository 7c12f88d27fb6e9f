package task

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/task/access"
)

// BusyError refuses a run because a bound was met: every slot and every
// queue place of the daemon, or a tenant's own quota. It is a
// resource-exhausted error that says when to retry, and which quota was met.
type BusyError struct {
	Running, Queued int
	RetryAfter      time.Duration
	// Quota names the bound that was met: the daemon's flag ("max-queued"),
	// or the tenants file's field ("max_queued", "max_sessions",
	// "runs_per_minute").
	Quota string
	// Tenant is the tenant whose quota was met, and Limit its value; empty
	// for the daemon's bound.
	Tenant string
	Limit  int
}

func (e *BusyError) Error() string {
	switch {
	case e.Tenant == "":
		return fmt.Sprintf("busy: %d tasks running and %d queued (--%s); retry in %v", e.Running, e.Queued, e.Quota, e.RetryAfter)
	case e.Quota == quotaRunsPerMinute:
		return fmt.Sprintf("quota: tenant %s may start %d runs a minute; retry in %v", e.Tenant, e.Limit, e.RetryAfter)
	case e.Quota == quotaMaxSessions:
		return fmt.Sprintf("quota: tenant %s holds its max_sessions of %d; delete one, or retry in %v", e.Tenant, e.Limit, e.RetryAfter)
	}
	return fmt.Sprintf("quota: tenant %s is at its %s of %d (%d running, %d queued); retry in %v", e.Tenant, e.Quota, e.Limit, e.Running, e.Queued, e.RetryAfter)
}

// ResourceExhausted marks BusyError for errdefs.IsResourceExhausted.
func (e *BusyError) ResourceExhausted() {}

// The tenants file's quotas, as refusals name them.
const (
	quotaMaxQueued     = "max_queued"
	quotaMaxSessions   = "max_sessions"
	quotaRunsPerMinute = "runs_per_minute"
)

// admission bounds how many runs execute at once and how many may wait,
// for the daemon and for each caller with a quota of its own, and serves
// the waiting fairly across callers: each freed slot goes to the next
// caller in turn that is below its own bound, not to the oldest waiter, so
// that a caller who queued 200 runs delays another's one run by about one
// run, not 200. A run beyond the bounds is refused at once rather than left
// to time out.
type admission struct {
	mu         sync.Mutex
	running    int
	maxRunning int
	queued     int
	maxQueued  int
	// waiting holds each caller's waiters, oldest first; turns is the
	// round of callers that have some, and next the one whose turn it is.
	waiting map[string][]*waiter
	turns   []string
	next    int
	// runningBy counts each caller's runs holding a slot, and quotas are
	// the bounds of the callers in the round.
	runningBy map[string]int
	quotas    map[string]callerQuota
	// meanRun is a moving average of run times, for the retry hint.
	meanRun time.Duration
	// onRelease is called when a slot frees up.
	onRelease func()
}

// callerQuota bounds one caller's runs; 0 leaves the daemon's bound.
type callerQuota struct {
	tenant          string
	running, queued int
}

// waiter is a queued run: ready is closed when it is granted a slot.
type waiter struct {
	ready   chan struct{}
	granted bool
}

func newAdmission(running, queued int) *admission {
	return &admission{maxRunning: running, maxQueued: queued, waiting: map[string][]*waiter{},
		runningBy: map[string]int{}, quotas: map[string]callerQuota{}, meanRun: time.Second}
}

// depth is how many runs hold a slot and how many wait for one.
func (a *admission) depth() (running, queued int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running, a.queued
}

// acquire takes a slot for a run of caller, within q, waiting in the queue
// if there is room in it.
func (a *admission) acquire(ctx context.Context, caller string, q callerQuota) (release func(ran time.Duration), err error) {
	release = func(ran time.Duration) {
		a.mu.Lock()
		a.meanRun = (a.meanRun*7 + ran) / 8
		a.free(caller)
		a.mu.Unlock()
		if a.onRelease != nil {
			a.onRelease()
		}
	}
	a.mu.Lock()
	w := &waiter{ready: make(chan struct{})}
	if len(a.waiting[caller]) == 0 {
		a.turns = append(a.turns, caller)
	}
	a.waiting[caller] = append(a.waiting[caller], w)
	a.quotas[caller] = q
	a.queued++
	a.grant()
	if w.granted {
		a.mu.Unlock()
		return release, nil
	}
	var busy *BusyError
	switch mine := len(a.waiting[caller]); {
	case q.queued > 0 && mine > q.queued:
		busy = &BusyError{Running: a.runningBy[caller], Queued: mine - 1, Quota: quotaMaxQueued, Tenant: q.tenant, Limit: q.queued,
			RetryAfter: a.retryAfter(mine-1, max(1, min(q.running, a.maxRunning)))}
	case a.queued > a.maxQueued:
		busy = &BusyError{Running: a.running, Queued: a.queued - 1, Quota: "max-queued", RetryAfter: a.retryAfter(a.queued-1, a.maxRunning)}
	}
	if busy != nil {
		a.drop(caller, w)
		a.mu.Unlock()
		return nil, busy
	}
	a.mu.Unlock()
	select {
	case <-w.ready:
		return release, nil
	case <-ctx.Done():
	}
	a.mu.Lock()
	if w.granted {
		// Granted as the caller gave up: the slot goes to the next.
		a.free(caller)
	} else {
		a.drop(caller, w)
	}
	a.mu.Unlock()
	return nil, context.Cause(ctx)
}

// free gives back a slot of caller's. Callers hold a.mu.
func (a *admission) free(caller string) {
	a.running--
	if a.runningBy[caller]--; a.runningBy[caller] == 0 {
		delete(a.runningBy, caller)
	}
	a.grant()
}

// grant gives the free slots to the waiters, one caller after another,
// passing over the callers at their own bound. Callers hold a.mu.
func (a *admission) grant() {
	for a.running < a.maxRunning && len(a.turns) > 0 {
		i := -1
		for k := range a.turns {
			j := (a.next + k) % len(a.turns)
			c := a.turns[j]
			if q := a.quotas[c].running; q == 0 || a.runningBy[c] < q {
				i = j
				break
			}
		}
		if i < 0 {
			return
		}
		caller := a.turns[i]
		q := a.waiting[caller]
		w := q[0]
		if len(q) == 1 {
			a.leave(caller, i)
		} else {
			a.waiting[caller] = q[1:]
			a.next = i + 1
		}
		a.queued--
		a.running++
		a.runningBy[caller]++
		w.granted = true
		close(w.ready)
	}
}

// leave takes caller, whose last waiter goes, out of the round, where it
// has index i. Callers hold a.mu.
func (a *admission) leave(caller string, i int) {
	delete(a.waiting, caller)
	delete(a.quotas, caller)
	a.turns = append(a.turns[:i], a.turns[i+1:]...)
	if a.next > i {
		a.next--
	}
}

// drop takes a waiter that gave up, or was refused, out of the queue.
// Callers hold a.mu.
func (a *admission) drop(caller string, w *waiter) {
	q := a.waiting[caller]
	i := slices.Index(q, w)
	if i < 0 {
		return
	}
	a.queued--
	if len(q) > 1 {
		a.waiting[caller] = append(q[:i:i], q[i+1:]...)
		return
	}
	a.leave(caller, slices.Index(a.turns, caller))
}

// full says whether tasks hold every slot.
func (a *admission) full() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running >= a.maxRunning
}

// retryAfter estimates when a slot frees up for a newcomer behind ahead
// waiters served slots at a time. Callers hold a.mu.
func (a *admission) retryAfter(ahead, slots int) time.Duration {
	waves := time.Duration(ahead/slots + 1)
	return max(100*time.Millisecond, (a.meanRun * waves).Round(100*time.Millisecond))
}

// admit takes a slot for a run of the caller of ctx: within its tenant's
// runs a minute, then its running and queued bounds and the daemon's.
func (s *Service) admit(ctx context.Context) (release func(ran time.Duration), err error) {
	c := access.CallerFrom(ctx)
	q := callerQuota{tenant: c.Name}
	if t := c.Tenant; t != nil {
		if wait, ok := s.rates.Take(c.Name, t.RunsPerMinute, time.Now()); !ok {
			return nil, &BusyError{Quota: quotaRunsPerMinute, Tenant: c.Name, Limit: t.RunsPerMinute, RetryAfter: wait}
		}
		q.running, q.queued = t.MaxRunning, t.MaxQueued
	}
	return s.admission.acquire(ctx, c.Name, q)
}
