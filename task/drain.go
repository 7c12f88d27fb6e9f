package task

import (
	"context"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/task/run"
)

// DrainingError refuses a new run or session while the daemon drains: it
// is unavailable here, and a retry after RetryAfter goes to another
// daemon (or to this one's successor).
type DrainingError struct{ RetryAfter time.Duration }

func (e *DrainingError) Error() string {
	return fmt.Sprintf("sandboxd is draining before it stops: it starts no new runs or sessions; retry in %v, on another daemon", e.RetryAfter)
}

// Unavailable marks DrainingError for errdefs.IsUnavailable.
func (e *DrainingError) Unavailable() {}

// drainRetry is the retry hint of a refusal while draining: about the time
// a load balancer takes to drop a daemon that stopped being ready.
const drainRetry = time.Second

// Drain stops taking new runs and sessions (the calls of live sessions go
// on) and waits until the runs in flight have ended, or ctx is done.
// Shutdown then cancels what is left.
func (s *Service) Drain(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	s.mu.Unlock()
	for {
		running := s.runs.List(func(r run.Info) bool { return r.State == run.Running })
		if len(running) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d runs still running: %w", len(running), context.Cause(ctx))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// refuseIfDraining refuses a new run or session while the daemon drains.
func (s *Service) refuseIfDraining() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return &DrainingError{RetryAfter: drainRetry}
	}
	return nil
}
