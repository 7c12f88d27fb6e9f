// Package output carries a run's output from its container to its
// caller: each stream capped for the caller, kept on disk up to the kill
// threshold for the bundle, followed by attachers, and delivered to the
// caller in order from a goroutine of its own, so that a slow caller never
// holds the run up and a flood never grows the daemon's memory.
package output

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"os"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/task/registry"
	"github.com/sandboxd/sandboxd/task/run"
)

// Emitter delivers a run's events to its Observer, in order, from a
// goroutine of its own: the run never waits for its caller. Started comes
// first, even when the program wrote before the run could say it started;
// events queue until the Observer takes them (chunks of one stream that
// queued behind it go as one event: a fast printer costs its caller fewer
// messages), and output is queued only up to the streams' caps, so the
// queue is bounded by them. Once the Observer fails (the caller is gone),
// nothing more is sent and the run is cancelled.
type Emitter struct {
	obs    run.Observer
	onFail func(error)

	mu     sync.Mutex
	queue  []event
	begun  bool // Started is queued: the rest may go
	closed bool
	err    error
	wake   chan struct{} // has a value when the queue has news
	done   chan struct{} // closed when the sender has ended
}

// event is one event for the Observer: Started, a chunk of output, or a
// network event.
type event struct {
	started *run.Started
	network *run.NetworkEvent
	stream  run.Stream
	data    []byte
}

// NewEmitter delivers to obs; onFail is called once when obs fails.
func NewEmitter(obs run.Observer, onFail func(error)) *Emitter {
	e := &Emitter{obs: obs, onFail: onFail, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go e.send()
	return e
}

// Started queues Started ahead of any output.
func (e *Emitter) Started(s run.Started) {
	e.mu.Lock()
	if e.closed || e.err != nil {
		e.mu.Unlock()
		return
	}
	e.queue = append([]event{{started: &s}}, e.queue...)
	e.begun = true
	e.mu.Unlock()
	e.signal()
}

// Output queues a copy of p: the writer may reuse it. A chunk of the same
// stream as the last one still queued is joined to it, up to maxEvent.
func (e *Emitter) Output(s run.Stream, p []byte) {
	e.mu.Lock()
	if e.closed || e.err != nil {
		e.mu.Unlock()
		return
	}
	if n := len(e.queue); n > 0 && e.queue[n-1].started == nil && e.queue[n-1].network == nil && e.queue[n-1].stream == s && len(e.queue[n-1].data)+len(p) <= maxEvent {
		e.queue[n-1].data = append(e.queue[n-1].data, p...)
	} else {
		e.queue = append(e.queue, event{stream: s, data: bytes.Clone(p)})
	}
	e.mu.Unlock()
	e.signal()
}

// Network queues a network event for an Observer that follows the
// network (run.NetworkObserver); others get none. The run's log bounds
// how many there are.
func (e *Emitter) Network(ev run.NetworkEvent) {
	if _, ok := e.obs.(run.NetworkObserver); !ok {
		return
	}
	e.mu.Lock()
	if e.closed || e.err != nil {
		e.mu.Unlock()
		return
	}
	e.queue = append(e.queue, event{network: &ev})
	e.mu.Unlock()
	e.signal()
}

func (e *Emitter) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// send hands the queued events to the Observer until the queue is closed
// and empty.
func (e *Emitter) send() {
	defer close(e.done)
	for {
		e.mu.Lock()
		for !e.closed && (len(e.queue) == 0 || !e.begun) {
			e.mu.Unlock()
			<-e.wake
			e.mu.Lock()
		}
		if len(e.queue) == 0 || !e.begun {
			// Closed: there is nothing, or the run never started.
			e.mu.Unlock()
			return
		}
		ev := e.queue[0]
		e.queue[0] = event{}
		e.queue = e.queue[1:]
		e.mu.Unlock()
		var err error
		switch {
		case ev.started != nil:
			err = e.obs.Started(*ev.started)
		case ev.network != nil:
			err = e.obs.(run.NetworkObserver).Network(*ev.network)
		default:
			err = e.obs.Output(ev.stream, ev.data)
		}
		if err != nil {
			e.fail(err)
			e.onFail(err)
		}
	}
}

// fail drops what is queued and refuses what comes: the caller is gone.
func (e *Emitter) fail(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err == nil {
		e.err = err
	}
	e.queue = nil
}

// Finish closes the queue and waits until the Observer has taken every
// event, at most timeout: a caller that stops reading is dropped rather
// than allowed to hold the run's output. It returns the Observer's error,
// or a deadline error when it stalled.
func (e *Emitter) Finish(timeout time.Duration) error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.signal()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-e.done:
	case <-timer.C:
		e.fail(fmt.Errorf("the caller took no output for %v: %w", timeout, context.DeadlineExceeded))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// maxEvent is the most output one event carries when chunks queued
// behind the caller are joined.
const maxEvent = 256 << 10

// Cap is what a Writer does with one stream.
type Cap struct {
	Stream run.Stream
	// Limit is how much of the stream the caller gets; the first KillAt
	// bytes are kept in Store for the bundle, and OnFlood is called once
	// when the stream passes KillAt.
	Limit, KillAt int64
	OnFlood       func(run.Stream)
	Store         *os.File
	// Live, when set, tells the run's attachers how much of the store
	// they may read.
	Live *registry.Live
}

// Writer is what a backend writes one output stream to. It passes the
// first Limit bytes on to the caller, keeps the first KillAt bytes in the
// store file for the bundle and hashes them as they come (the bundle then
// reads them once, not twice, after the run), counts every byte, and
// calls OnFlood once when the total passes KillAt. It holds no output in
// memory, so the daemon's memory does not grow with what a program prints.
type Writer struct {
	Cap
	emit *Emitter

	mu        sync.Mutex
	total     int64
	flooded   bool
	storeLeft int64
	kept      int64
	sum       hash.Hash // of the kept bytes
}

// NewWriter writes a stream that emit delivers.
func NewWriter(emit *Emitter, c Cap) *Writer {
	return &Writer{Cap: c, emit: emit, storeLeft: c.KillAt, sum: sha256.New()}
}

// Write takes all of p, always: the stream must be drained to its end, or
// the program would block on a full pipe instead of being stopped by its
// limits.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	// An empty write (a copier's last) is no event: clients would see
	// output events that carry nothing.
	if room := w.Limit - w.total; room > 0 && len(p) > 0 {
		w.emit.Output(w.Stream, p[:min(int64(len(p)), room)])
	}
	if w.storeLeft > 0 && w.Store != nil {
		n, err := w.Store.Write(p[:min(int64(len(p)), w.storeLeft)])
		w.sum.Write(p[:n])
		w.kept += int64(n)
		w.storeLeft -= int64(n)
		if err != nil {
			// A full disk ends the stored copy, not the run.
			w.storeLeft = 0
		}
	}
	w.total += int64(len(p))
	if w.Live != nil {
		w.Live.Grew(w.Stream, min(w.kept, w.Limit))
	}
	if w.total > w.KillAt && !w.flooded {
		w.flooded = true
		go w.OnFlood(w.Stream)
	}
	return len(p), nil
}

// Stored returns how many bytes the store file holds, and their SHA-256.
func (w *Writer) Stored() (int64, []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.kept, w.sum.Sum(nil)
}

// Counts returns the bytes written and whether the caller got only a part.
func (w *Writer) Counts() (total int64, truncated bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.total, w.total > w.Limit
}
