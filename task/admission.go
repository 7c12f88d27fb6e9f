package task

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// BusyError refuses a run because every slot and every queue place is
// taken. It is a resource-exhausted error that says when to retry, and
// which quota was met.
type BusyError struct {
	Running, Queued int
	RetryAfter      time.Duration
	// Quota names the bound that was met, as its flag does.
	Quota string
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("busy: %d tasks running and %d queued (--%s); retry in %v", e.Running, e.Queued, e.Quota, e.RetryAfter)
}

// ResourceExhausted marks BusyError for errdefs.IsResourceExhausted.
func (e *BusyError) ResourceExhausted() {}

// admission bounds how many runs execute at once and how many may wait,
// and serves the waiting fairly across callers: each freed slot goes to
// the next caller in turn, not to the oldest waiter, so that a caller who
// queued 200 runs delays another's one run by about one run, not 200. A
// run beyond both bounds is refused at once rather than left to time out.
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
	// meanRun is a moving average of run times, for the retry hint.
	meanRun time.Duration
	// onRelease is called when a slot frees up.
	onRelease func()
}

// waiter is a queued run: ready is closed when it is granted a slot.
type waiter struct {
	ready   chan struct{}
	granted bool
}

func newAdmission(running, queued int) *admission {
	return &admission{maxRunning: running, maxQueued: queued, waiting: map[string][]*waiter{}, meanRun: time.Second}
}

// acquire takes a slot for a run of caller, waiting in the queue if there
// is room in it.
func (a *admission) acquire(ctx context.Context, caller string) (release func(ran time.Duration), err error) {
	release = func(ran time.Duration) {
		a.mu.Lock()
		a.running--
		a.meanRun = (a.meanRun*7 + ran) / 8
		a.grant()
		a.mu.Unlock()
		if a.onRelease != nil {
			a.onRelease()
		}
	}
	a.mu.Lock()
	if a.running < a.maxRunning && a.queued == 0 {
		a.running++
		a.mu.Unlock()
		return release, nil
	}
	if a.queued >= a.maxQueued {
		busy := &BusyError{Running: a.running, Queued: a.queued, RetryAfter: a.retryAfter(), Quota: "max-queued"}
		a.mu.Unlock()
		return nil, busy
	}
	w := &waiter{ready: make(chan struct{})}
	if len(a.waiting[caller]) == 0 {
		a.turns = append(a.turns, caller)
	}
	a.waiting[caller] = append(a.waiting[caller], w)
	a.queued++
	a.mu.Unlock()
	select {
	case <-w.ready:
		return release, nil
	case <-ctx.Done():
	}
	a.mu.Lock()
	if w.granted {
		// Granted as the caller gave up: the slot goes to the next.
		a.running--
		a.grant()
	} else {
		a.drop(caller, w)
	}
	a.mu.Unlock()
	return nil, context.Cause(ctx)
}

// grant gives the free slots to the waiters, one caller after another.
// Callers hold a.mu.
func (a *admission) grant() {
	for a.running < a.maxRunning && len(a.turns) > 0 {
		i := a.next % len(a.turns)
		caller := a.turns[i]
		q := a.waiting[caller]
		w := q[0]
		if len(q) == 1 {
			delete(a.waiting, caller)
			a.turns = append(a.turns[:i], a.turns[i+1:]...)
			a.next = i // the caller after it now has index i
		} else {
			a.waiting[caller] = q[1:]
			a.next = i + 1
		}
		a.queued--
		a.running++
		w.granted = true
		close(w.ready)
	}
}

// drop takes a waiter that gave up out of the queue. Callers hold a.mu.
func (a *admission) drop(caller string, w *waiter) {
	q := a.waiting[caller]
	for i, x := range q {
		if x != w {
			continue
		}
		a.queued--
		if len(q) > 1 {
			a.waiting[caller] = append(q[:i:i], q[i+1:]...)
			return
		}
		delete(a.waiting, caller)
		for j, c := range a.turns {
			if c == caller {
				a.turns = append(a.turns[:j], a.turns[j+1:]...)
				if a.next > j {
					a.next--
				}
				break
			}
		}
		return
	}
}

// full says whether tasks hold every slot.
func (a *admission) full() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running >= a.maxRunning
}

// retryAfter estimates when a slot frees up for a newcomer: the queue
// ahead of it drains a slot-width at a time. Callers hold a.mu.
func (a *admission) retryAfter() time.Duration {
	waves := time.Duration(a.queued/a.maxRunning + 1)
	return max(100*time.Millisecond, (a.meanRun * waves).Round(100*time.Millisecond))
}
