package docker

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"

	"github.com/sandboxd/sandboxd/runtime"
)

// imageCache keeps what ImageInspect said of each name while Docker's
// event stream says no image changed since. An inspect is 1.2-1.6 ms of
// every run, and Docker has no content-addressed lookup of a name to key
// a cache by, as containerd has: any image event (pull, tag, untag,
// delete, load, import) empties it, and so does losing the stream, after
// which every Image inspects until the stream is back.
//
// A name moved outside sandboxd (docker tag) is seen once Docker has
// delivered its event, a millisecond or so after the move returned; a run
// resolving the name in between runs the image it was moved from, and its
// bundle says which.
type imageCache struct {
	mu sync.Mutex
	// gen counts the events and losses of the stream: an inspect keeps its
	// answer only if none came while it ran.
	gen  uint64
	live bool
	refs map[string]runtime.Image
}

// keptImages bounds the names a daemon keeps: one per image it runs.
const keptImages = 64

// get returns what was kept of ref, and otherwise the generation an
// inspect of it starts in.
func (c *imageCache) get(ref string) (runtime.Image, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	img, ok := c.refs[ref]
	return cloneImage(img), c.gen, ok
}

// put keeps img for ref, unless the stream is down or an event came since
// the inspect started in generation gen.
func (c *imageCache) put(ref string, gen uint64, img runtime.Image) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.live || c.gen != gen {
		return
	}
	if len(c.refs) >= keptImages {
		clear(c.refs)
	}
	c.refs[ref] = cloneImage(img)
}

// changed empties the cache and marks the stream live or lost.
func (c *imageCache) changed(live bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.live = live
	clear(c.refs)
}

func cloneImage(img runtime.Image) runtime.Image {
	img.Labels, img.Env, img.Volumes = maps.Clone(img.Labels), slices.Clone(img.Env), slices.Clone(img.Volumes)
	return img
}

// imageEventsRetry is how long the cache waits to follow the stream again
// after losing it.
const imageEventsRetry = time.Second

// follow keeps c true to Docker's image events until ctx ends. A loss is
// logged once, not at every retry while dockerd is away, and so is the
// stream's return.
func (c *imageCache) follow(ctx context.Context, cl Client, log *slog.Logger) {
	lost := false
	for {
		err := c.followOnce(ctx, cl, func() {
			if lost {
				log.Info("docker's image events are back: inspected images are kept again")
				lost = false
			}
		})
		c.changed(false)
		if ctx.Err() != nil {
			return
		}
		if !lost {
			log.Warn("lost docker's image events: images are inspected at every run until they are back", "err", err)
			lost = true
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(imageEventsRetry):
		}
	}
}

// followOnce follows one subscription to the stream, from Docker's clock
// before it subscribed: Docker answers the request before it subscribes,
// and replays from its buffer the events since then, so none between the
// two is missed. live is called once it has subscribed.
func (c *imageCache) followOnce(ctx context.Context, cl Client, live func()) error {
	info, err := cl.Info(ctx)
	if err != nil {
		return err
	}
	since, err := time.Parse(time.RFC3339Nano, info.SystemTime)
	if err != nil {
		return fmt.Errorf("docker's clock %q: %w", info.SystemTime, err)
	}
	msgs, errs := cl.Events(ctx, events.ListOptions{
		Since:   fmt.Sprintf("%d.%09d", since.Unix(), since.Nanosecond()),
		Filters: filters.NewArgs(filters.Arg("type", string(events.ImageEventType))),
	})
	c.changed(true)
	live()
	for {
		select {
		case <-msgs:
			c.changed(true)
		case err := <-errs:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
