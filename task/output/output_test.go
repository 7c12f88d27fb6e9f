package output

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/task/run"
)

// recorder is an Observer that keeps everything.
type recorder struct {
	mu     sync.Mutex
	out    bytes.Buffer
	chunks int
	failAt int // fail the Output call with this index (1-based); 0 never
}

func newRecorder() *recorder { return &recorder{} }

func (r *recorder) Started(run.Started) error { return nil }

func (r *recorder) Output(_ run.Stream, p []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.chunks++
	if r.chunks == r.failAt {
		return errors.New("caller went away")
	}
	r.out.Write(p)
	return nil
}

func (r *recorder) text(run.Stream) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.String()
}

// stalledRecorder takes the Started event, then blocks on output.
type stalledRecorder struct {
	*recorder
	release chan struct{}
}

func (s *stalledRecorder) Output(run.Stream, []byte) error {
	<-s.release
	return errors.New("gone")
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
			em := NewEmitter(rec, func(error) {})
			em.Started(run.Started{})
			w := NewWriter(em, Cap{Stream: run.Stdout, Limit: tt.limit, KillAt: tt.killAt,
				OnFlood: func(s run.Stream) { flooded <- s }})
			for _, s := range tt.writes {
				if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
					t.Fatalf("Write(%q) = %d, %v; it must always take everything", s, n, err)
				}
			}
			if err := em.Finish(time.Second); err != nil {
				t.Fatal(err)
			}
			total, trunc := w.Counts()
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
	e := NewEmitter(rec, func(err error) { failed <- err })
	e.Started(run.Started{})
	// Streams alternate, so that no two chunks are joined into one event.
	e.Output(run.Stdout, []byte("one"))
	e.Output(run.Stderr, []byte("two"))
	e.Output(run.Stdout, []byte("three"))
	if err := e.Finish(time.Second); err == nil {
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
	e := NewEmitter(slow, func(error) {})
	e.Started(run.Started{})
	start := time.Now()
	for range 1000 {
		e.Output(run.Stdout, []byte("x"))
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("1000 outputs took %v with a blocked Observer", took)
	}
	if err := e.Finish(50 * time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
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
	e := NewEmitter(obs, func(error) {})
	e.Output(run.Stdout, []byte("early"))
	e.Started(run.Started{RunID: "r"})
	e.Output(run.Stdout, []byte("late"))
	if err := e.Finish(time.Second); err != nil {
		t.Fatal(err)
	}
	if len(order) == 0 || order[0] != "started" || strings.Join(order[1:], "") != "earlylate" {
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

// TestEmptyWriteIsNoEvent: a copier's last, empty write reaches no client
// as an output event that carries nothing.
func TestEmptyWriteIsNoEvent(t *testing.T) {
	rec := newRecorder()
	em := NewEmitter(rec, func(error) {})
	em.Started(run.Started{})
	w := NewWriter(em, Cap{Stream: run.Stdout, Limit: 10, KillAt: 100})
	for _, s := range []string{"", "abc", ""} {
		w.Write([]byte(s))
	}
	if err := em.Finish(time.Second); err != nil {
		t.Fatal(err)
	}
	if rec.chunks != 1 || rec.text(run.Stdout) != "abc" {
		t.Fatalf("%d output events (%q), want one with the bytes", rec.chunks, rec.text(run.Stdout))
	}
}

// TestWriterHashesWhatItStores: the stored copy's digest is of exactly the
// bytes the store file holds, up to the kill threshold: the bundle takes it
// instead of reading the file a second time.
func TestWriterHashesWhatItStores(t *testing.T) {
	for _, killAt := range []int64{1 << 20, 5} {
		f, err := os.Create(filepath.Join(t.TempDir(), "stdout"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		em := NewEmitter(newRecorder(), func(error) {})
		em.Started(run.Started{})
		w := NewWriter(em, Cap{Stream: run.Stdout, Limit: 4, KillAt: killAt, Store: f, OnFlood: func(run.Stream) {}})
		for _, s := range []string{"abc", "def", "ghi"} {
			w.Write([]byte(s))
		}
		if err := em.Finish(time.Second); err != nil {
			t.Fatal(err)
		}
		stored, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		n, sum := w.Stored()
		want := sha256.Sum256(stored)
		if n != int64(len(stored)) || !bytes.Equal(sum, want[:]) {
			t.Errorf("kill at %d: Stored() = %d, %x; the file holds %d bytes of digest %x", killAt, n, sum, len(stored), want)
		}
		if wantLen := min(killAt, 9); int64(len(stored)) != wantLen {
			t.Errorf("kill at %d: stored %d bytes, want %d", killAt, len(stored), wantLen)
		}
	}
}

// chunkRecorder keeps each Output event apart, and Started as an event
// of its own.
type chunkRecorder struct {
	mu     sync.Mutex
	events []string
	hold   chan struct{} // the first Output waits for it
}

func (c *chunkRecorder) Started(run.Started) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, "started")
	return nil
}

func (c *chunkRecorder) Output(s run.Stream, p []byte) error {
	c.mu.Lock()
	first := len(c.events) == 1
	c.events = append(c.events, s.String()+":"+string(p))
	c.mu.Unlock()
	if first {
		<-c.hold
	}
	return nil
}

// TestQueuedChunksAreJoined: chunks that queue behind a slow caller go as
// one event per run of the same stream, in order, up to maxEvent bytes
// each; one that comes while the caller keeps up goes at once, alone.
func TestQueuedChunksAreJoined(t *testing.T) {
	rec := &chunkRecorder{hold: make(chan struct{})}
	em := NewEmitter(rec, func(error) {})
	em.Started(run.Started{})
	em.Output(run.Stdout, []byte("a"))
	for len(rec.snapshot()) < 2 {
		time.Sleep(time.Millisecond) // "a" is with the caller, who holds it
	}
	for _, c := range []struct {
		s run.Stream
		p string
	}{{run.Stdout, "b"}, {run.Stdout, "c"}, {run.Stderr, "d"}, {run.Stdout, "e"}} {
		em.Output(c.s, []byte(c.p))
	}
	big := strings.Repeat("x", maxEvent)
	em.Output(run.Stdout, []byte(big))
	em.Output(run.Stdout, []byte("f"))
	close(rec.hold)
	if err := em.Finish(time.Second); err != nil {
		t.Fatal(err)
	}
	want := []string{"started", "stdout:a", "stdout:bc", "stderr:d", "stdout:e", "stdout:" + big, "stdout:f"}
	if got := rec.snapshot(); !slices.Equal(got, want) {
		t.Errorf("events %.80q, want %.80q", got, want)
	}
}

func (c *chunkRecorder) snapshot() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.events)
}
