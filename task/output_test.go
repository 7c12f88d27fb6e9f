package task

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/task/run"
)

// recorder is an Observer that keeps everything.
type recorder struct {
	mu      sync.Mutex
	started []run.Started
	out     map[run.Stream]*bytes.Buffer
	chunks  int
	failAt  int // fail the Output call with this index (1-based); 0 never
}

func newRecorder() *recorder {
	return &recorder{out: map[run.Stream]*bytes.Buffer{run.Stdout: {}, run.Stderr: {}}}
}

func (r *recorder) Started(s run.Started) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started = append(r.started, s)
	return nil
}

func (r *recorder) Output(s run.Stream, p []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.chunks++
	if r.chunks == r.failAt {
		return errors.New("caller went away")
	}
	r.out[s].Write(p)
	return nil
}

// runID is the id of the run that started, or "" before it did.
func (r *recorder) runID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.started) == 0 {
		return ""
	}
	return r.started[0].RunID
}

func (r *recorder) text(s run.Stream) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out[s].String()
}

func TestAdmission(t *testing.T) {
	a := newAdmission(2, 1)
	ctx := context.Background()
	r1, err := a.acquire(ctx, "a", callerQuota{})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := a.acquire(ctx, "a", callerQuota{})
	if err != nil {
		t.Fatal(err)
	}
	// The third waits in the queue; the fourth is refused at once.
	got := make(chan error, 1)
	go func() {
		r3, err := a.acquire(ctx, "a", callerQuota{})
		if err == nil {
			r3(0)
		}
		got <- err
	}()
	deadline := time.Now().Add(time.Second)
	for {
		a.mu.Lock()
		q := a.queued
		a.mu.Unlock()
		if q == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the third request did not queue")
		}
		time.Sleep(time.Millisecond)
	}
	_, err = a.acquire(ctx, "a", callerQuota{})
	var busy *BusyError
	if !errors.As(err, &busy) || !errdefs.IsResourceExhausted(err) {
		t.Fatalf("fourth acquire = %v, want a resource-exhausted BusyError", err)
	}
	if busy.RetryAfter <= 0 {
		t.Fatalf("RetryAfter = %v, want a positive hint", busy.RetryAfter)
	}
	r1(time.Second)
	if err := <-got; err != nil {
		t.Fatalf("queued acquire = %v, want a slot once one frees", err)
	}
	r2(time.Second)

	// A queued request gives up with its context.
	a = newAdmission(1, 1)
	hold, _ := a.acquire(ctx, "a", callerQuota{})
	defer hold(0)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := a.acquire(cctx, "a", callerQuota{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued acquire with an expiring context = %v", err)
	}
}
