package task

import (
	"os"
	"sync"
)

// Stream names an output stream.
type Stream int

// The output streams of a program.
const (
	Stdout Stream = 1
	Stderr Stream = 2
)

func (s Stream) String() string {
	if s == Stderr {
		return "stderr"
	}
	return "stdout"
}

// emitter serializes a run's events to its Observer: backends may write
// stdout and stderr from different goroutines. Once the Observer fails
// (the caller is gone), nothing more is sent and the run is cancelled.
type emitter struct {
	mu     sync.Mutex
	obs    Observer
	err    error
	onFail func(error)
}

func (e *emitter) started(s Started) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err == nil {
		e.err = e.obs.Started(s)
	}
	return e.err
}

func (e *emitter) output(s Stream, p []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return
	}
	if err := e.obs.Output(s, p); err != nil {
		e.err = err
		go e.onFail(err)
	}
}

// capWriter is what a backend writes one output stream to. It passes the
// first limit bytes on to the caller, keeps the first storeLeft bytes in the
// store file for the bundle, counts every byte, and calls onFlood once when
// the total passes killAt. It holds no output in memory, so the daemon's
// memory does not grow with what a program prints.
type capWriter struct {
	stream  Stream
	emit    *emitter
	limit   int64
	killAt  int64
	onFlood func(Stream)
	store   *os.File

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
