package docker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/client"
	dockerspec "github.com/moby/docker-image-spec/specs-go/v1"

	"github.com/sandboxd/sandboxd/internal/testutil"
)

// imageEvents is a Client with one image, "name", whose ID the test moves,
// and an event stream the test feeds or breaks.
type imageEvents struct {
	Client
	clock string

	mu sync.Mutex
	// failInfo is how many Info calls after the first fail, as while
	// dockerd restarts.
	failInfo int
	infos    int
	id       string
	inspects int
	since    []string
	msgs     chan events.Message
	errs     chan error
	// during runs inside ImageInspect, before it answers.
	during func()
}

func newImageEvents() *imageEvents {
	return &imageEvents{clock: "2026-12-04T09:30:00.123456789Z", id: "sha256:aaa"}
}

func (c *imageEvents) Info(context.Context) (system.Info, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.infos++
	if c.infos > 1 && c.infos <= 1+c.failInfo {
		return system.Info{}, errors.New("Cannot connect to the Docker daemon")
	}
	return system.Info{SystemTime: c.clock}, nil
}

func (c *imageEvents) Events(_ context.Context, opts events.ListOptions) (<-chan events.Message, <-chan error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.since = append(c.since, opts.Since)
	c.msgs, c.errs = make(chan events.Message), make(chan error, 1)
	return c.msgs, c.errs
}

func (c *imageEvents) ImageInspect(_ context.Context, ref string, _ ...client.ImageInspectOption) (image.InspectResponse, error) {
	c.mu.Lock()
	c.inspects++
	id, during := c.id, c.during
	c.mu.Unlock()
	if during != nil {
		during()
	}
	cfg := &dockerspec.DockerOCIImageConfig{}
	cfg.Env, cfg.Labels = []string{"A=1"}, map[string]string{"l": "v"}
	return image.InspectResponse{ID: id, Config: cfg}, nil
}

func (c *imageEvents) stream() (chan events.Message, chan error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.msgs, c.errs
}

func (c *imageEvents) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inspects
}

// following returns a Runtime on c that follows its events, once it has
// subscribed, logging to log.
func following(t *testing.T, c *imageEvents, log io.Writer) *Runtime {
	t.Helper()
	r := &Runtime{client: c, log: slog.New(slog.NewTextHandler(log, nil))}
	r.followImages()
	t.Cleanup(func() {
		r.stopImages()
		<-r.imagesFollowed
	})
	testutil.WaitFor(t, "the subscription", func() bool { return r.images.Live() })
	return r
}

func imageID(t *testing.T, r *Runtime) string {
	t.Helper()
	img, err := r.Image(context.Background(), "name")
	if err != nil {
		t.Fatal(err)
	}
	return img.ID
}

// TestImageKeptUntilAnImageEvent: an image's name is inspected once while
// no image event comes; an event (a tag moved) has the next Image inspect
// it again and see the move.
func TestImageKeptUntilAnImageEvent(t *testing.T) {
	c := newImageEvents()
	r := following(t, c, io.Discard)
	if got := c.since; len(got) != 1 || got[0] != "1796376600.123456789" {
		t.Fatalf("subscribed since %q, want Docker's clock before the subscription, 1796376600.123456789", got)
	}
	imageID(t, r)
	img, err := r.Image(context.Background(), "name")
	if err != nil {
		t.Fatal(err)
	}
	if c.count() != 1 {
		t.Fatalf("%d inspects for two Images of one name, want 1", c.count())
	}
	// What a caller does with what it got does not reach the cache.
	img.Env[0], img.Labels["l"] = "A=changed", "changed"
	if again, _ := r.Image(context.Background(), "name"); again.Env[0] != "A=1" || again.Labels["l"] != "v" {
		t.Fatalf("the kept image changed with a caller's copy: %v %v", again.Env, again.Labels)
	}

	c.mu.Lock()
	c.id = "sha256:bbb"
	c.mu.Unlock()
	gen := r.images.Generation()
	msgs, _ := c.stream()
	msgs <- events.Message{Type: events.ImageEventType, Action: events.ActionTag}
	testutil.WaitFor(t, "the event", func() bool { return r.images.Generation() != gen })
	if id := imageID(t, r); id != "sha256:bbb" || c.count() != 2 {
		t.Fatalf("after a tag event Image is %s after %d inspects, want sha256:bbb after 2", id, c.count())
	}
}

// TestImageInspectedAcrossAnEventIsNotKept: an event that comes while a
// name is inspected keeps that answer out of the cache: it may be from
// before the change.
func TestImageInspectedAcrossAnEventIsNotKept(t *testing.T) {
	c := newImageEvents()
	r := following(t, c, io.Discard)
	msgs, _ := c.stream()
	c.during = func() {
		gen := r.images.Generation()
		msgs <- events.Message{Type: events.ImageEventType, Action: events.ActionDelete}
		testutil.WaitFor(t, "the event", func() bool { return r.images.Generation() != gen })
	}
	imageID(t, r)
	c.mu.Lock()
	c.during = nil
	c.mu.Unlock()
	imageID(t, r)
	if c.count() != 2 {
		t.Fatalf("%d inspects, want 2: the answer of the first came across an event and was kept", c.count())
	}
}

// TestImageInspectsWhileEventsAreLost: while the stream is lost every Image
// inspects; once it is followed again, from Docker's clock anew, names are
// kept again. The loss is logged once, however many retries fail, and so is
// the return.
func TestImageInspectsWhileEventsAreLost(t *testing.T) {
	c := newImageEvents()
	c.failInfo = 1
	var log testutil.Buffer
	r := following(t, c, &log)
	imageID(t, r)
	_, errs := c.stream()
	errs <- errors.New("unexpected EOF")
	testutil.WaitFor(t, "the loss", func() bool { return !r.images.Live() })
	imageID(t, r)
	imageID(t, r)
	if c.count() != 3 {
		t.Fatalf("%d inspects, want 3: one before the loss, one for each Image after it", c.count())
	}
	testutil.WaitFor(t, "the second subscription", func() bool { return r.images.Live() })
	c.mu.Lock()
	subscriptions := len(c.since)
	c.mu.Unlock()
	if subscriptions != 2 {
		t.Fatalf("%d subscriptions, want 2", subscriptions)
	}
	testutil.WaitFor(t, "the return in the log", func() bool { return strings.Contains(log.String(), "events are back") })
	if lost, back := strings.Count(log.String(), "lost docker's image events"), strings.Count(log.String(), "events are back"); lost != 1 || back != 1 {
		t.Fatalf("logged the loss %d times and the return %d, want once each over two failed tries:\n%s", lost, back, log.String())
	}
	imageID(t, r)
	imageID(t, r)
	if c.count() != 4 {
		t.Fatalf("%d inspects, want 4: names are kept again once the stream is back", c.count())
	}
}
