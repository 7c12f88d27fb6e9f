// Package imagecache keeps what a backend read of each image name while
// the backend's event stream says no image changed since: resolving a name
// is otherwise a round trip to the backend's daemon on every run (1.2-1.6 ms of
// Docker's ImageInspect, 0.4-0.9 ms of containerd's image lookup). Each
// backend follows its daemon's events and tells the Cache of them.
//
// A name moved outside sandboxd is seen once the backend's daemon has delivered its
// event, a millisecond or so after the move returned; a run resolving the
// name in between runs the image it was moved from, and its bundle says
// which.
package imagecache

import (
	"maps"
	"slices"
	"sync"

	"github.com/sandboxd/sandboxd/runtime"
)

// Cache is the images read, by name, while the stream says they hold.
type Cache struct {
	mu sync.Mutex
	// gen counts the events and losses of the stream: a read keeps its
	// answer only if none came while it ran.
	gen  uint64
	live bool
	refs map[string]runtime.Image
}

// kept bounds the names a daemon keeps: one per image it runs.
const kept = 64

// New returns an empty Cache that keeps nothing until the stream is live.
func New() *Cache { return &Cache{refs: map[string]runtime.Image{}} }

// Resolve returns what was kept of ref, or what read says of it; that is
// kept unless the stream is down or an event came while read ran.
func (c *Cache) Resolve(ref string, read func() (runtime.Image, error)) (runtime.Image, error) {
	c.mu.Lock()
	img, ok := c.refs[ref]
	gen := c.gen
	c.mu.Unlock()
	if ok {
		return clone(img), nil
	}
	img, err := read()
	if err != nil {
		return img, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live && c.gen == gen {
		if len(c.refs) >= kept {
			clear(c.refs)
		}
		c.refs[ref] = clone(img)
	}
	return img, nil
}

// Changed empties the cache at an event, and marks the stream live (it is
// followed from now on) or lost.
func (c *Cache) Changed(live bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.live = live
	clear(c.refs)
}

// Live says whether the stream is followed, so that what is read is kept.
func (c *Cache) Live() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live
}

// Generation counts the events and losses told so far.
func (c *Cache) Generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

func clone(img runtime.Image) runtime.Image {
	img.Labels, img.Env, img.Volumes = maps.Clone(img.Labels), slices.Clone(img.Env), slices.Clone(img.Volumes)
	return img
}
