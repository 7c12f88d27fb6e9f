package imagecache

import (
	"errors"
	"testing"

	"github.com/sandboxd/sandboxd/runtime"
)

// reader reads ref as the image id, counting its reads.
type reader struct {
	id    string
	reads int
}

func (r *reader) read() (runtime.Image, error) {
	r.reads++
	return runtime.Image{ID: r.id, Env: []string{"A=1"}, Labels: map[string]string{"l": "v"}}, nil
}

// TestResolve: nothing is kept until the stream is live; then a name is
// read once, and a caller's changes to its copy do not reach the cache;
// an event empties it.
func TestResolve(t *testing.T) {
	c, r := New(), &reader{id: "sha256:aaa"}
	for range 2 {
		if _, err := c.Resolve("name", r.read); err != nil {
			t.Fatal(err)
		}
	}
	if r.reads != 2 {
		t.Fatalf("%d reads of a name before the stream is live, want 2: nothing is kept", r.reads)
	}
	c.Changed(true)
	img, _ := c.Resolve("name", r.read)
	img.Env[0], img.Labels["l"] = "A=changed", "changed"
	again, _ := c.Resolve("name", r.read)
	if r.reads != 3 || again.Env[0] != "A=1" || again.Labels["l"] != "v" {
		t.Fatalf("%d reads, the kept image %v %v; want 3 reads and the image as read", r.reads, again.Env, again.Labels)
	}
	r.id = "sha256:bbb"
	c.Changed(true)
	if img, _ := c.Resolve("name", r.read); img.ID != "sha256:bbb" || r.reads != 4 {
		t.Fatalf("after an event the name is %s after %d reads, want sha256:bbb after 4", img.ID, r.reads)
	}
	c.Changed(false)
	c.Resolve("name", r.read)
	if c.Live() || r.reads != 5 {
		t.Fatalf("live %v after %d reads, want a lost stream to read every time", c.Live(), r.reads)
	}
}

// TestResolveAcrossAnEvent: what was read while an event came is not
// kept (it may be from before the change), nor is a failed read.
func TestResolveAcrossAnEvent(t *testing.T) {
	c, r := New(), &reader{id: "sha256:aaa"}
	c.Changed(true)
	c.Resolve("name", func() (runtime.Image, error) {
		c.Changed(true)
		return r.read()
	})
	c.Resolve("name", r.read)
	if r.reads != 2 {
		t.Fatalf("%d reads, want 2: the first came across an event and was kept", r.reads)
	}
	failed := errors.New("engine away")
	if _, err := c.Resolve("other", func() (runtime.Image, error) { return runtime.Image{}, failed }); !errors.Is(err, failed) {
		t.Fatalf("Resolve = %v, want the read's error", err)
	}
	c.Resolve("other", r.read)
	if r.reads != 3 {
		t.Fatalf("%d reads, want 3: a failed read was kept", r.reads)
	}
}
