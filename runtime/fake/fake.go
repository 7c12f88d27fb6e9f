// Package fake is an in-memory runtime.Runtime for tests of the task engine
// and of the protocol edges above it. A container "runs" a Go function that
// the test supplies, which writes the output and picks the exit.
package fake

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/runtime"
)

// Program is what a fake container runs. It must return when ctx is done
// (the container was killed), and should then report Code 137.
type Program func(ctx context.Context, spec runtime.Spec) runtime.Exit

// Runtime is a fake engine.
type Runtime struct {
	// Images maps references to IDs; a reference not in it is not found.
	Images map[string]string
	// Run decides what every container does.
	Run Program
	// Runtimes are the OCI runtimes the engine has; runc is its default.
	Runtimes []runtime.OCIRuntime

	mu    sync.Mutex
	specs []runtime.Spec
	live  map[string]*Container
}

var _ runtime.Runtime = (*Runtime)(nil)

// New returns a fake engine with the default images, whose containers run p.
func New(p Program) *Runtime {
	return &Runtime{
		Images:   map[string]string{"sandboxd/python": "sha256:python", "sandboxd/shell": "sha256:shell"},
		Run:      p,
		Runtimes: []runtime.OCIRuntime{{Name: "runc", Version: "fake"}},
		live:     map[string]*Container{},
	}
}

// Info reports r.Runtimes, with runc as the default.
func (r *Runtime) Info(context.Context) (runtime.Info, error) {
	return runtime.Info{Backend: "fake", Version: "1", DefaultRuntime: "runc", Runtimes: r.Runtimes}, nil
}

// Image resolves ref in r.Images, by name or by ID. Every image carries the
// label of a sandbox image, as the images the set-up builds do.
func (r *Runtime) Image(_ context.Context, ref string) (runtime.Image, error) {
	for name, id := range r.Images {
		if ref == name || ref == id {
			return runtime.Image{ID: id, Ref: ref, Labels: map[string]string{"io.sandboxd.image": strings.TrimPrefix(name, "sandboxd/")}}, nil
		}
	}
	return runtime.Image{}, errdefs.ErrNotFound.WithMessage("no image " + ref)
}

// Start runs r.Run in a goroutine.
func (r *Runtime) Start(_ context.Context, spec runtime.Spec) (runtime.Container, error) {
	ctx, kill := context.WithCancel(context.Background())
	c := &Container{rt: r, id: spec.ID, labels: spec.Labels, kill: kill, done: make(chan struct{})}
	r.mu.Lock()
	if _, dup := r.live[spec.ID]; dup {
		r.mu.Unlock()
		return nil, errdefs.ErrAlreadyExists.WithMessage(fmt.Sprintf("container %s exists", spec.ID))
	}
	r.specs = append(r.specs, spec)
	r.live[spec.ID] = c
	r.mu.Unlock()
	go func() {
		started := time.Now()
		c.exit = r.Run(ctx, spec)
		c.exit.StartedAt, c.exit.FinishedAt = started, time.Now()
		close(c.done)
	}()
	return c, nil
}

// Reap removes every live container that carries all of labels.
func (r *Runtime) Reap(_ context.Context, labels map[string]string) (int, error) {
	r.mu.Lock()
	var live []*Container
	for _, c := range r.live {
		if matches(c.labels, labels) {
			live = append(live, c)
		}
	}
	r.mu.Unlock()
	for _, c := range live {
		_ = c.Remove(context.Background())
	}
	return len(live), nil
}

// Specs returns the specs of every container started so far.
func (r *Runtime) Specs() []runtime.Spec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]runtime.Spec(nil), r.specs...)
}

// Live returns the IDs of containers not yet removed.
func (r *Runtime) Live() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, 0, len(r.live))
	for id := range r.live {
		ids = append(ids, id)
	}
	return ids
}

func matches(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// Container is a fake container.
type Container struct {
	rt     *Runtime
	id     string
	labels map[string]string
	kill   context.CancelFunc
	done   chan struct{}
	exit   runtime.Exit
}

// ID returns the container's ID.
func (c *Container) ID() string { return c.id }

// Wait waits for the program to return.
func (c *Container) Wait(ctx context.Context) (runtime.Exit, error) {
	select {
	case <-c.done:
		return c.exit, nil
	case <-ctx.Done():
		return runtime.Exit{}, ctx.Err()
	}
}

// Kill cancels the program's context.
func (c *Container) Kill(context.Context) error {
	c.kill()
	return nil
}

// Remove kills the program, waits for it, and forgets the container.
func (c *Container) Remove(context.Context) error {
	c.kill()
	<-c.done
	c.rt.mu.Lock()
	delete(c.rt.live, c.id)
	c.rt.mu.Unlock()
	return nil
}
