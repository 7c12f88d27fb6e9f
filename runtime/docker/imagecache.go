package docker

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"

	"github.com/sandboxd/sandboxd/internal/sandbox/imagecache"
)

// imageCache is the Cache of what ImageInspect said of each name: any
// image event (pull, tag, untag, delete, load, import) empties it, and so
// does losing the stream, after which every Image inspects until the
// stream is back.
type imageCache struct{ *imagecache.Cache }

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
		c.Changed(false)
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
	c.Changed(true)
	live()
	for {
		select {
		case <-msgs:
			c.Changed(true)
		case err := <-errs:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
