package task

import (
	"context"
	"fmt"
	"time"
)

// DrainingError refuses a new run or session while the daemon drains or
// stops: it is unavailable here, and a retry after RetryAfter goes to
// another daemon (or to this one's successor).
type DrainingError struct{ RetryAfter time.Duration }

func (e *DrainingError) Error() string {
	return fmt.Sprintf("sandboxd is stopping: it starts no new runs or sessions; retry in %v, on another daemon", e.RetryAfter)
}

// Unavailable marks DrainingError for errdefs.IsUnavailable.
func (e *DrainingError) Unavailable() {}

// drainRetry is the retry hint of a refusal while draining: about the time
// a load balancer takes to drop a daemon that stopped being ready.
const drainRetry = time.Second

// Drain stops taking new runs and sessions (the calls of live sessions go
// on) and waits until what it had taken has ended, or ctx is done: runs
// under way, runs still queued or getting their container, sessions being
// made. Shutdown then cancels what is left.
func (s *Service) Drain(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	s.mu.Unlock()
	for {
		s.mu.Lock()
		entered := s.entered
		s.mu.Unlock()
		if entered == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d runs or sessions still under way: %w", entered, context.Cause(ctx))
		case <-time.After(100 * time.Millisecond):
		}
	}
}
