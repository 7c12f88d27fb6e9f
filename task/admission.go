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
	// meanRun is the mean of run times, over the first few runs and then
	// a moving average, and runs how many it has seen; holders are when
	// each granted waiter got its slot, and whose it is. The retry hint
	// is made of them.
	meanRun time.Duration
	runs    int
	holders map[*waiter]holder
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

// holder is a run holding a slot: its caller, and since when.
type holder struct {
	caller string
	since  time.Time
}

// meanWindow is how many runs the mean of run times averages alike; later
// ones weigh 1/meanWindow each, so that it follows a changing load.
const meanWindow = 8

func newAdmission(running, queued int) *admission {
	return &admission{maxRunning: running, maxQueued: queued, waiting: map[string][]*waiter{},
		runningBy: map[string]int{}, quotas: map[string]callerQuota{}, meanRun: time.Second, holders: map[*waiter]holder{}}
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
	w := &waiter{ready: make(chan struct{})}
	release = func(ran time.Duration) {
		a.mu.Lock()
		// The first runs replace the default rather than nudge it: a
		// default of 1 s told waiters behind 4 s runs to come back in
		// 1.4 s.
		a.runs = min(a.runs+1, meanWindow)
		a.meanRun += (ran - a.meanRun) / time.Duration(a.runs)
		a.free(caller, w)
		a.mu.Unlock()
		if a.onRelease != nil {
			a.onRelease()
		}
	}
	a.mu.Lock()
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
		slots := a.maxRunning
		if q.running > 0 {
			slots = min(q.running, slots)
		}
		busy = &BusyError{Running: a.runningBy[caller], Queued: mine - 1, Quota: quotaMaxQueued, Tenant: q.tenant, Limit: q.queued,
			RetryAfter: a.retryAfter(time.Now(), mine-1, slots, caller)}
	case a.queued > a.maxQueued:
		busy = &BusyError{Running: a.running, Queued: a.queued - 1, Quota: "max-queued", RetryAfter: a.retryAfter(time.Now(), a.queued-1, a.maxRunning, "")}
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
		a.free(caller, w)
	} else {
		a.drop(caller, w)
	}
	a.mu.Unlock()
	return nil, context.Cause(ctx)
}

// free gives back w's slot, of caller's. Callers hold a.mu.
func (a *admission) free(caller string, w *waiter) {
	delete(a.holders, w)
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
		a.holders[w] = holder{caller: caller, since: time.Now()}
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

// retryAfter estimates when, after now, a slot frees up for a newcomer
// behind ahead waiters, with slots slots to share: those of caller's runs
// when caller is set, else all. A run is taken to last as long as the
// mean, or as the longest running one has run already, whichever is
// longer; each running one frees its slot when it has run that long (a
// tenth of it at the least), and each waiter ahead then holds it as long.
// Callers hold a.mu.
func (a *admission) retryAfter(now time.Time, ahead, slots int, caller string) time.Duration {
	var free []time.Duration // when each slot frees up, from now
	length := a.meanRun
	for _, h := range a.holders {
		if caller == "" || h.caller == caller {
			free = append(free, now.Sub(h.since))
			length = max(length, now.Sub(h.since))
		}
	}
	for i, ran := range free {
		free[i] = max(length-ran, length/10)
	}
	for len(free) < max(slots, 1) {
		free = append(free, 0)
	}
	// Each waiter ahead, and then the newcomer, takes the slot that frees
	// up first.
	var at time.Duration
	for range ahead + 1 {
		i := slices.Index(free, slices.Min(free))
		at = free[i]
		free[i] += length
	}
	return max(100*time.Millisecond, at.Round(100*time.Millisecond))
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
