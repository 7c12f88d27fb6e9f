package containerd

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/v2/core/events"
	"github.com/containerd/typeurl/v2"
)

// eventStreams is a Client whose Subscribe hands out streams the test
// feeds; the rest of Client is not called.
type eventStreams struct {
	Client
	subscribed chan subscription
}

type subscription struct {
	filters []string
	evs     chan *events.Envelope
	errs    chan error
}

func (c *eventStreams) Subscribe(ctx context.Context, filters ...string) (<-chan *events.Envelope, <-chan error) {
	s := subscription{filters: filters, evs: make(chan *events.Envelope), errs: make(chan error, 1)}
	c.subscribed <- s
	return s.evs, s.errs
}

func oomEvent(t *testing.T, id string) *events.Envelope {
	t.Helper()
	a, err := typeurl.MarshalAnyToProto(&apievents.TaskOOM{ContainerID: id})
	if err != nil {
		t.Fatal(err)
	}
	return &events.Envelope{Namespace: "sandboxd", Topic: "/tasks/oom", Event: a}
}

// TestOOMWatch: one subscription, to the namespace's OOM events, serves
// every container; each hears only its own; a stream that breaks is
// subscribed again; close ends it.
func TestOOMWatch(t *testing.T) {
	c := &eventStreams{subscribed: make(chan subscription, 1)}
	w := newOOMWatch(c, "sandboxd", slog.New(slog.NewTextHandler(io.Discard, nil)))
	a, b := w.watch("a"), w.watch("b")
	first := <-c.subscribed
	if want := `topic=="/tasks/oom",namespace=="sandboxd"`; len(first.filters) != 1 || first.filters[0] != want {
		t.Fatalf("subscribed with filters %q, want %q", first.filters, want)
	}
	first.evs <- oomEvent(t, "b")
	first.evs <- oomEvent(t, "someone else's")
	told(t, b, "b's OOM kill")
	notTold(t, a, "a was told of b's OOM kill")
	select {
	case s := <-c.subscribed:
		t.Fatalf("a second subscription, %v, for a second container", s.filters)
	default:
	}

	// A forgotten container is not told; a stream that broke is
	// subscribed to again.
	w.forget("a")
	c2 := w.watch("c")
	first.errs <- errors.New("containerd restarted")
	var second subscription
	select {
	case second = <-c.subscribed:
	case <-time.After(5 * time.Second):
		t.Fatal("no new subscription after the stream broke")
	}
	second.evs <- oomEvent(t, "a")
	second.evs <- oomEvent(t, "c")
	told(t, c2, "c's OOM kill on the new stream")
	notTold(t, a, "a forgotten container was told")

	done := make(chan struct{})
	go func() { w.close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("close did not end the subscription")
	}
	w.watch("d")
	select {
	case s := <-c.subscribed:
		t.Fatalf("subscribed, %v, after close", s.filters)
	default:
	}
}

// told fails t unless ch is closed within 5 s.
func told(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s was not told", what)
	}
}

// notTold fails t if ch is closed.
func notTold(t *testing.T, ch <-chan struct{}, failure string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatal(failure)
	default:
	}
}
