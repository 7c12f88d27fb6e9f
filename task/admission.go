package task

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// BusyError refuses a run because every slot and every queue place is
// taken. It is a resource-exhausted error that says when to retry.
type BusyError struct {
	Running, Queued int
	RetryAfter      time.Duration
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("busy: %d tasks running and %d queued; retry in %v", e.Running, e.Queued, e.RetryAfter)
}

// ResourceExhausted marks BusyError for errdefs.IsResourceExhausted.
func (e *BusyError) ResourceExhausted() {}

// admission bounds how many runs execute at once and how many may wait.
// A run beyond both is refused at once rather than left to time out.
type admission struct {
	slots chan struct{}

	mu        sync.Mutex
	queued    int
	maxQueued int
	// meanRun is a moving average of run times, for the retry hint.
	meanRun time.Duration
	// onRelease is called when a slot frees up.
	onRelease func()
}

func newAdmission(running, queued int) *admission {
	return &admission{slots: make(chan struct{}, running), maxQueued: queued, meanRun: time.Second}
}

// acquire takes a slot, waiting in the queue if there is room in it.
func (a *admission) acquire(ctx context.Context) (release func(ran time.Duration), err error) {
	release = func(ran time.Duration) {
		<-a.slots
		a.mu.Lock()
		a.meanRun = (a.meanRun*7 + ran) / 8
		a.mu.Unlock()
		if a.onRelease != nil {
			a.onRelease()
		}
	}
	select {
	case a.slots <- struct{}{}:
		return release, nil
	default:
	}
	a.mu.Lock()
	if a.queued >= a.maxQueued {
		busy := &BusyError{Running: cap(a.slots), Queued: a.queued, RetryAfter: a.retryAfter()}
		a.mu.Unlock()
		return nil, busy
	}
	a.queued++
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.queued--
		a.mu.Unlock()
	}()
	select {
	case a.slots <- struct{}{}:
		return release, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// full says whether tasks hold every slot.
func (a *admission) full() bool { return len(a.slots) == cap(a.slots) }

// retryAfter estimates when a slot frees up for a newcomer: the queue
// ahead of it drains a slot-width at a time. Callers hold a.mu.
func (a *admission) retryAfter() time.Duration {
	waves := time.Duration(a.queued/cap(a.slots) + 1)
	return max(100*time.Millisecond, (a.meanRun * waves).Round(100*time.Millisecond))
}
