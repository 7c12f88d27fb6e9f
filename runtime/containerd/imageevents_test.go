package containerd

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	client "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/events"

	"github.com/sandboxd/sandboxd/internal/sandbox/imagecache"
	"github.com/sandboxd/sandboxd/internal/testutil"
)

// publisher is an EventService whose Publish the test counts; the rest is
// not called.
type publisher struct {
	client.EventService
	mu        sync.Mutex
	published []string
}

func (p *publisher) Publish(_ context.Context, topic string, _ events.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.published = append(p.published, topic)
	return nil
}

func (p *publisher) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.published)
}

type imageStreams struct {
	eventStreams
	pub *publisher
}

func (c *imageStreams) EventService() client.EventService { return c.pub }

// TestImageEvents: the cache keeps nothing until the subscription's own
// event has come back on it (containerd registers a subscription after it
// answers it), which is published again until it does; an image event then
// empties the cache; a lost stream stops the keeping, logged once, until a
// new subscription is proven live.
func TestImageEvents(t *testing.T) {
	c := &imageStreams{eventStreams: eventStreams{subscribed: make(chan subscription, 1)}, pub: &publisher{}}
	var log testutil.Buffer
	e := &port{client: c, opts: Options{Namespace: "sandboxd", Log: slog.New(slog.NewTextHandler(&log, nil))}}
	ie := &imageEvents{cache: imagecache.New()}
	ie.start(e)
	t.Cleanup(ie.close)
	first := <-c.subscribed
	want := []string{`namespace=="sandboxd",topic~="^/images/"`, `namespace=="sandboxd",topic=="/sandboxd/images-followed"`}
	if strings.Join(first.filters, " ") != strings.Join(want, " ") {
		t.Fatalf("subscribed with filters %q, want %q", first.filters, want)
	}
	// The first publications are lost, as before containerd registered
	// the subscription: they are repeated, and nothing is kept meanwhile.
	testutil.WaitFor(t, "a second publication", func() bool { return c.pub.count() >= 2 })
	if ie.cache.Live() {
		t.Fatal("the cache keeps images before the subscription was proven live")
	}
	first.evs <- &events.Envelope{Namespace: "sandboxd", Topic: "/images/update"}
	if ie.cache.Live() {
		t.Fatal("an image event made the unproven subscription live")
	}
	first.evs <- &events.Envelope{Namespace: "sandboxd", Topic: followedTopic}
	testutil.WaitFor(t, "the subscription", ie.cache.Live)
	published := c.pub.count()
	time.Sleep(3 * followedRetry)
	if c.pub.count() != published {
		t.Fatalf("published %d more events after the subscription was live", c.pub.count()-published)
	}

	gen := ie.cache.Generation()
	first.evs <- &events.Envelope{Namespace: "sandboxd", Topic: followedTopic} // another daemon's
	first.evs <- &events.Envelope{Namespace: "sandboxd", Topic: "/images/delete"}
	testutil.WaitFor(t, "the image event", func() bool { return ie.cache.Generation() != gen })
	if got := ie.cache.Generation(); got != gen+1 {
		t.Fatalf("generation %d after another daemon's event and an image event, want %d: only the image event empties the cache", got, gen+1)
	}

	first.errs <- errors.New("unexpected EOF")
	testutil.WaitFor(t, "the loss", func() bool { return !ie.cache.Live() })
	second := <-c.subscribed
	second.evs <- &events.Envelope{Namespace: "sandboxd", Topic: followedTopic}
	testutil.WaitFor(t, "the second subscription", ie.cache.Live)
	testutil.WaitFor(t, "the return in the log", func() bool { return strings.Contains(log.String(), "events are back") })
	if lost := strings.Count(log.String(), "lost containerd's image events"); lost != 1 {
		t.Fatalf("logged the loss %d times, want once:\n%s", lost, log.String())
	}
}

// TestImageEventsClose: close ends the following, and one that never
// started closes too.
func TestImageEventsClose(t *testing.T) {
	(&imageEvents{cache: imagecache.New()}).close()
	c := &imageStreams{eventStreams: eventStreams{subscribed: make(chan subscription, 1)}, pub: &publisher{}}
	e := &port{client: c, opts: Options{Namespace: "sandboxd", Log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	ie := &imageEvents{cache: imagecache.New()}
	ie.start(e)
	<-c.subscribed
	done := make(chan struct{})
	go func() { ie.close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("close did not end the following")
	}
	ie.start(e)
	select {
	case <-c.subscribed:
		t.Fatal("a start after close followed again")
	case <-time.After(50 * time.Millisecond):
	}
}
