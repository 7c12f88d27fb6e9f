package task

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runtime/fake"
)

// lockedBuffer is a log sink the pool's goroutine and the test share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// manualClock is a clock that moves only when the test moves it.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestPoolBacksOffWhileEveryPrepareFails is issue 29's pool: with an engine
// that fails every create, the pool tried 47 times in 27 s and logged each.
// Now each key waits 1 s, 2 s, 4 s ... (up to 5 min) between tries, says
// "failing" once and "recovered" once, and its state is in the pool's status
// (which the inventory and the metrics report).
func TestPoolBacksOffWhileEveryPrepareFails(t *testing.T) {
	rt := fake.New(echo)
	rt.SetPrepareErr(errors.New("runc create failed: can't get final child's PID from pipe: EOF"))
	var log lockedBuffer
	clock := &manualClock{now: time.Now()}
	s := newService(t, rt, nil, WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	// The pool's own loop is not run: the test alone fills it, on its
	// clock.
	p := makePool(s.ex, rt, 1, 0, s.poolKeys, func() bool { return false })
	p.now = clock.Now
	t.Cleanup(func() {
		close(p.stopped)
		p.close()
	})

	// Two images on runc: one try of each per due time, however often the
	// pool is woken.
	tries := func() int {
		p.fill(true)
		for range 20 {
			p.fill(false)
		}
		return rt.PrepareAttempts()
	}
	base := tries()
	if after := tries(); after != base {
		t.Fatalf("%d prepares while backing off, want none", after-base)
	}
	for _, step := range []struct {
		advance time.Duration
		want    int // more prepares
	}{
		{time.Second, 2},            // the first wait (1 s) is over
		{time.Second, 0},            // the second wait is 2 s
		{time.Second, 2},            //
		{3 * time.Second, 0},        // then 4 s
		{time.Second, 2},            //
		{backoffMax + time.Hour, 2}, // never more than backoffMax
	} {
		clock.advance(step.advance)
		before := rt.PrepareAttempts()
		if got := tries() - before; got != step.want {
			t.Fatalf("after %v: %d prepares, want %d", step.advance, got, step.want)
		}
	}
	if n := log.count("failing"); n != 2 {
		t.Errorf("%d log lines say failing, want one per pool:\n%s", n, log.b.String())
	}
	if n := log.count("level=WARN"); n != 0 {
		t.Errorf("%d warnings logged, want the failures only as state changes", n)
	}

	pools, err := p.status(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if len(pools) != 2 {
		t.Fatalf("pools = %+v, want two", pools)
	}
	for _, p := range pools {
		if p.FailingSince.IsZero() || !strings.Contains(p.Failure, "final child's PID") || p.Failures < 5 {
			t.Errorf("pool %s = %+v, want failing since the first try with the engine's reason", p.Image, p)
		}
	}

	rt.SetPrepareErr(nil)
	clock.advance(backoffMax)
	tries()
	if n := log.count("recovered"); n != 2 {
		t.Errorf("%d log lines say recovered, want one per pool:\n%s", n, log.b.String())
	}
	if pools, err = p.status(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	for _, p := range pools {
		if !p.FailingSince.IsZero() || p.Ready != 1 {
			t.Errorf("pool %s = %+v, want recovered and full", p.Image, p)
		}
	}
}

func TestBackoffDoublesUpToItsMaximum(t *testing.T) {
	for _, tt := range []struct {
		tries int
		want  time.Duration
	}{{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {9, 256 * time.Second}, {10, backoffMax}, {1000, backoffMax}} {
		if got := backoff(tt.tries); got != tt.want {
			t.Errorf("backoff(%d) = %v, want %v", tt.tries, got, tt.want)
		}
	}
}
