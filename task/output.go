package task

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/task/registry"
	"github.com/sandboxd/sandboxd/task/run"
)

// emitter delivers a run's events to its Observer, in order, from a
// goroutine of its own: the run never waits for its caller. Started comes
// first, even when the program wrote before the run could say it started;
// events queue until the Observer takes them, and output is queued only up
// to the streams' caps, so the queue is bounded by them. Once the Observer
// fails (the caller is gone), nothing more is sent and the run is
// cancelled.
type emitter struct {
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

// event is one event for the Observer: Started, or a chunk of output.
type event struct {
	started *run.Started
	stream  run.Stream
	data    []byte
}

func newEmitter(obs run.Observer, onFail func(error)) *emitter {
	e := &emitter{obs: obs, onFail: onFail, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go e.send()
	return e
}

// started queues Started ahead of any output.
func (e *emitter) started(s run.Started) {
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

// output queues a copy of p: the writer may reuse it.
func (e *emitter) output(s run.Stream, p []byte) { e.push(event{stream: s, data: bytes.Clone(p)}) }

func (e *emitter) push(ev event) {
	e.mu.Lock()
	if e.closed || e.err != nil {
		e.mu.Unlock()
		return
	}
	e.queue = append(e.queue, ev)
	e.mu.Unlock()
	e.signal()
}

func (e *emitter) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// send hands the queued events to the Observer until the queue is closed
// and empty.
func (e *emitter) send() {
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
		if ev.started != nil {
			err = e.obs.Started(*ev.started)
		} else {
			err = e.obs.Output(ev.stream, ev.data)
		}
		if err != nil {
			e.fail(err)
			e.onFail(err)
		}
	}
}

// fail drops what is queued and refuses what comes: the caller is gone.
func (e *emitter) fail(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err == nil {
		e.err = err
	}
	e.queue = nil
}

// finish closes the queue and waits until the Observer has taken every
// event, at most timeout: a caller that stops reading is dropped rather
// than allowed to hold the run's output. It returns the Observer's error,
// or a deadline error when it stalled.
func (e *emitter) finish(timeout time.Duration) error {
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

// capWriter is what a backend writes one output stream to. It passes the
// first limit bytes on to the caller, keeps the first storeLeft bytes in the
// store file for the bundle, counts every byte, and calls onFlood once when
// the total passes killAt. It holds no output in memory, so the daemon's
// memory does not grow with what a program prints.
type capWriter struct {
	stream  run.Stream
	emit    *emitter
	limit   int64
	killAt  int64
	onFlood func(run.Stream)
	store   *os.File
	// out tells the run's attachers how much of the store they may read.
	out *registry.Live

	mu        sync.Mutex
	total     int64
	flooded   bool
	storeLeft int64
	kept      int64
}

func (w *capWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := w.limit - w.total; room > 0 {
		w.emit.output(w.stream, p[:min(int64(len(p)), room)])
	}
	if w.storeLeft > 0 && w.store != nil {
		n, err := w.store.Write(p[:min(int64(len(p)), w.storeLeft)])
		w.kept += int64(n)
		w.storeLeft -= int64(n)
		if err != nil {
			// A full disk ends the stored copy, not the run.
			w.storeLeft = 0
		}
	}
	w.total += int64(len(p))
	if w.out != nil {
		w.out.Grew(w.stream, min(w.kept, w.limit))
	}
	if w.total > w.killAt && !w.flooded {
		w.flooded = true
		go w.onFlood(w.stream)
	}
	// Never fail: the stream must be drained to its end, or the program
	// would block on a full pipe instead of being stopped by its limits.
	return len(p), nil
}

// stored returns how many bytes the store file holds.
func (w *capWriter) stored() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.kept
}

// counts returns the bytes written and whether the caller got only a part.
func (w *capWriter) counts() (total int64, truncated bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.total, w.total > w.limit
}
