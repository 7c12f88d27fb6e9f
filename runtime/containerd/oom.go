package containerd

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/v2/core/events"
	"github.com/containerd/typeurl/v2"
)

// oomWatch tells containers of their OOM kills, which containerd reports
// only as events, from one subscription of the daemon's. A subscription of
// each container's own was a stream opened and closed for every task, and
// every event containerd published went through the filter of each one
// open: 5% of a task's CPU on containerd/crun (docs/benchmarks.md).
type oomWatch struct {
	client Client
	filter string
	log    *slog.Logger

	mu sync.Mutex
	// boxes are the watched containers' channels, closed at an OOM kill.
	boxes map[string]chan struct{}
	// stop ends the subscription; nil until the first watch, and after
	// close.
	stop   context.CancelFunc
	closed bool
	done   chan struct{}
}

func newOOMWatch(c Client, namespace string, log *slog.Logger) *oomWatch {
	return &oomWatch{
		client: c, log: log, boxes: map[string]chan struct{}{},
		filter: fmt.Sprintf(`topic=="/tasks/oom",namespace==%q`, namespace),
	}
}

// watch returns a channel closed when containerd reports an OOM kill in
// container id, from now until forget(id). The subscription starts with
// the first watch, before that container's task is made.
func (w *oomWatch) watch(id string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := make(chan struct{})
	w.boxes[id] = ch
	if w.stop == nil && !w.closed {
		ctx, stop := context.WithCancel(context.Background())
		w.stop, w.done = stop, make(chan struct{})
		evs, errs := w.client.Subscribe(ctx, w.filter)
		go w.run(ctx, evs, errs)
	}
	return ch
}

// forget stops watching container id.
func (w *oomWatch) forget(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.boxes, id)
}

// close ends the subscription.
func (w *oomWatch) close() {
	w.mu.Lock()
	stop, done := w.stop, w.done
	w.stop, w.closed = nil, true
	w.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// run passes events on until ctx ends, subscribing again when the stream
// breaks (containerd restarted): an OOM kill reported in between is
// missed, and its container's exit reads as a SIGKILL's.
func (w *oomWatch) run(ctx context.Context, evs <-chan *events.Envelope, errs <-chan error) {
	defer close(w.done)
	for {
		select {
		case ev := <-evs:
			w.dispatch(ev)
			continue
		case err := <-errs:
			if ctx.Err() != nil {
				return
			}
			w.log.Warn("containerd's OOM events broke off; subscribing again", "err", err)
		case <-ctx.Done():
			return
		}
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return
		}
		evs, errs = w.client.Subscribe(ctx, w.filter)
	}
}

func (w *oomWatch) dispatch(ev *events.Envelope) {
	if ev == nil {
		return
	}
	v, err := typeurl.UnmarshalAny(ev.Event)
	oom, ok := v.(*apievents.TaskOOM)
	if err != nil || !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch, ok := w.boxes[oom.ContainerID]; ok {
		close(ch)
		delete(w.boxes, oom.ContainerID)
	}
}
