package containerd

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/sandboxd/sandboxd/internal/sandbox/imagecache"
)

// imageEvents keeps what Image resolved while containerd's image events
// (create, update, delete in the namespace) say it holds: a name's lookup
// is a round trip to containerd, 0.4-0.9 ms of every run here. Following
// starts with the first Image and ends with Close.
type imageEvents struct {
	cache *imagecache.Cache
	once  sync.Once
	stop  context.CancelFunc
	done  chan struct{}
}

// followedTopic is the event a daemon publishes to learn that its
// subscription is live: containerd answers a subscription before it has
// registered it, and sends nothing on it until an event comes.
const followedTopic = "/sandboxd/images-followed"

// imageEventsRetry is how long the cache waits to follow the stream again
// after losing it; followedRetry how often the subscription's own event is
// published until it comes back.
const (
	imageEventsRetry = time.Second
	followedRetry    = 100 * time.Millisecond
)

// start follows e's image events, once.
func (ie *imageEvents) start(e *port) {
	ie.once.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		ie.stop, ie.done = cancel, make(chan struct{})
		go func() {
			defer close(ie.done)
			ie.follow(ctx, e)
		}()
	})
}

// close ends the following, if it started.
func (ie *imageEvents) close() {
	ie.once.Do(func() {}) // no following starts after this
	if ie.stop != nil {
		ie.stop()
		<-ie.done
	}
}

// follow keeps the cache true to the events until ctx ends. A loss is
// logged once, not at every retry while containerd is away, and so is the
// stream's return.
func (ie *imageEvents) follow(ctx context.Context, e *port) {
	lost := false
	for {
		err := ie.followOnce(ctx, e, func() {
			if lost {
				e.opts.Log.Info("containerd's image events are back: resolved images are kept again")
				lost = false
			}
		})
		ie.cache.Changed(false)
		if ctx.Err() != nil {
			return
		}
		if !lost {
			e.opts.Log.Warn("lost containerd's image events: images are looked up at every run until they are back", "err", err)
			lost = true
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(imageEventsRetry):
		}
	}
}

// followOnce follows one subscription. It publishes an event of its own
// until that comes back on the subscription, which is then live: from
// there on no image change is missed, and the cache keeps what is read.
func (ie *imageEvents) followOnce(ctx context.Context, e *port, live func()) error {
	ns := e.opts.Namespace
	evs, errs := e.client.Subscribe(ctx, fmt.Sprintf(`namespace==%q,topic~="^/images/"`, ns), fmt.Sprintf(`namespace==%q,topic==%q`, ns, followedTopic))
	publish := func() {
		// A failure shows as the stream's error, or is retried.
		_ = e.client.EventService().Publish(e.ns(ctx), followedTopic, &emptypb.Empty{})
	}
	publish()
	retry := time.NewTicker(followedRetry)
	defer retry.Stop()
	followed := false
	for {
		select {
		case ev := <-evs:
			switch {
			case ev.Topic != followedTopic:
				if followed {
					ie.cache.Changed(true)
				}
			case !followed:
				// Another daemon's event on the namespace proves the
				// subscription as well as this one's.
				followed = true
				retry.Stop()
				ie.cache.Changed(true)
				live()
			}
		case <-retry.C:
			publish()
		case err := <-errs:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
