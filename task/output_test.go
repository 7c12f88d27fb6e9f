package task

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/runtime"
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

func TestOutcome(t *testing.T) {
	lim := limits.Defaults()
	tests := []struct {
		name       string
		exit       runtime.Exit
		reason     killReason
		wantStatus run.Status
		wantSignal int
	}{
		{name: "zero", exit: runtime.Exit{Code: 0}, wantStatus: run.StatusOK},
		{name: "nonzero", exit: runtime.Exit{Code: 3}, wantStatus: run.StatusNonzeroExit},
		{name: "segfault", exit: runtime.Exit{Code: 139}, wantStatus: run.StatusKilledBySignal, wantSignal: 11},
		{name: "oom", exit: runtime.Exit{Code: 137, OOMKilled: true}, wantStatus: run.StatusOOMKilled, wantSignal: 9},
		{name: "oom of a child, program fine", exit: runtime.Exit{Code: 0, OOMKilled: true}, wantStatus: run.StatusOK},
		{name: "timeout wins over the kill signal", exit: runtime.Exit{Code: 137}, reason: killedTimeout, wantStatus: run.StatusTimeout, wantSignal: 9},
		{name: "timeout wins over oom", exit: runtime.Exit{Code: 137, OOMKilled: true}, reason: killedTimeout, wantStatus: run.StatusTimeout, wantSignal: 9},
		{name: "output flood", exit: runtime.Exit{Code: 137}, reason: killedOutput, wantStatus: run.StatusOutputLimit, wantSignal: 9},
		{name: "cancelled", exit: runtime.Exit{Code: 137}, reason: killedCancelled, wantStatus: run.StatusCancelled, wantSignal: 9},
		{name: "exit 255 is not a signal", exit: runtime.Exit{Code: 255}, wantStatus: run.StatusNonzeroExit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, msg, sig := outcome(tt.exit, tt.reason, "cancelled", run.Stdout, 16<<20, lim)
			if st != tt.wantStatus || sig != tt.wantSignal {
				t.Fatalf("outcome() = %s, %d; want %s, %d", st, sig, tt.wantStatus, tt.wantSignal)
			}
			if msg == "" {
				t.Fatal("outcome() gave no message")
			}
		})
	}
}
