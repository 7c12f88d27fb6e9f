package task

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/task/run"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/runtime"
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

func TestCapWriter(t *testing.T) {
	tests := []struct {
		name          string
		limit, killAt int64
		writes        []string
		wantOut       string
		wantTotal     int64
		wantTrunc     bool
		wantFlood     bool
	}{
		{name: "under the cap", limit: 10, killAt: 100, writes: []string{"abc", "def"}, wantOut: "abcdef", wantTotal: 6},
		{name: "exactly the cap", limit: 6, killAt: 100, writes: []string{"abc", "def"}, wantOut: "abcdef", wantTotal: 6},
		{name: "cap inside a chunk", limit: 4, killAt: 100, writes: []string{"abc", "def", "ghi"}, wantOut: "abcd", wantTotal: 9, wantTrunc: true},
		{name: "past the kill threshold", limit: 2, killAt: 5, writes: []string{"abc", "def"}, wantOut: "ab", wantTotal: 6, wantTrunc: true, wantFlood: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder()
			flooded := make(chan run.Stream, 1)
			em := newEmitter(rec, func(error) {})
			em.started(run.Started{})
			w := &capWriter{stream: run.Stdout, emit: em, limit: tt.limit, killAt: tt.killAt,
				onFlood: func(s run.Stream) { flooded <- s }}
			for _, s := range tt.writes {
				if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
					t.Fatalf("Write(%q) = %d, %v; it must always take everything", s, n, err)
				}
			}
			if err := em.finish(time.Second); err != nil {
				t.Fatal(err)
			}
			total, trunc := w.counts()
			if got := rec.text(run.Stdout); got != tt.wantOut {
				t.Errorf("delivered %q, want %q", got, tt.wantOut)
			}
			if total != tt.wantTotal || trunc != tt.wantTrunc {
				t.Errorf("counts() = %d, %v; want %d, %v", total, trunc, tt.wantTotal, tt.wantTrunc)
			}
			select {
			case <-flooded:
				if !tt.wantFlood {
					t.Error("onFlood called under the threshold")
				}
			case <-time.After(100 * time.Millisecond):
				if tt.wantFlood {
					t.Error("onFlood not called past the threshold")
				}
			}
		})
	}
}

func TestEmitterStopsAfterFailure(t *testing.T) {
	rec := newRecorder()
	rec.failAt = 2
	failed := make(chan error, 1)
	e := newEmitter(rec, func(err error) { failed <- err })
	e.started(run.Started{})
	e.output(run.Stdout, []byte("one"))
	e.output(run.Stdout, []byte("two"))
	e.output(run.Stdout, []byte("three"))
	if err := e.finish(time.Second); err == nil {
		t.Fatal("finish() = nil, want the Observer's error")
	}
	if got := rec.text(run.Stdout); got != "one" {
		t.Fatalf("delivered %q, want only the chunk before the failure", got)
	}
	if rec.chunks != 2 {
		t.Fatalf("Output called %d times, want 2: nothing is sent after a failure", rec.chunks)
	}
	if err := <-failed; err == nil {
		t.Fatal("onFail got no error")
	}
}

// TestEmitterNeverWaitsForItsObserver has an Observer that blocks: output
// is still taken at once, in order, and a finish gives up after its
// timeout with a deadline error.
func TestEmitterNeverWaitsForItsObserver(t *testing.T) {
	release := make(chan struct{})
	slow := &stalledRecorder{recorder: newRecorder(), release: release}
	e := newEmitter(slow, func(error) {})
	e.started(run.Started{})
	start := time.Now()
	for range 1000 {
		e.output(run.Stdout, []byte("x"))
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("1000 outputs took %v with a blocked Observer", took)
	}
	if err := e.finish(50 * time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("finish() = %v, want a deadline error", err)
	}
	close(release)
}

// TestStartedComesFirst queues output before Started, as a fast program
// writes before its run can say it started: the Observer gets Started
// first.
func TestStartedComesFirst(t *testing.T) {
	var order []string
	obs := &orderRecorder{order: &order}
	e := newEmitter(obs, func(error) {})
	e.output(run.Stdout, []byte("early"))
	e.started(run.Started{RunID: "r"})
	e.output(run.Stdout, []byte("late"))
	if err := e.finish(time.Second); err != nil {
		t.Fatal(err)
	}
	if strings.Join(order, " ") != "started early late" {
		t.Fatalf("events in the order %q, want started first", order)
	}
}

type orderRecorder struct{ order *[]string }

func (o *orderRecorder) Started(run.Started) error {
	*o.order = append(*o.order, "started")
	return nil
}
func (o *orderRecorder) Output(_ run.Stream, p []byte) error {
	*o.order = append(*o.order, string(p))
	return nil
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
