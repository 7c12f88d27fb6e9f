// Package pool keeps containers started ahead of time, per image and OCI
// runtime, each for exactly one task: a task claims one, the pool forgets
// it, and the task removes it when done like a container made for it.
// Nothing of one task can reach the next.
//
// What to keep ready, how to make one and whether the engine is busy are
// functions the engine passes in; the pool refills, backs off a key whose
// prepares fail, and reports how full and how healthy each key is.
package pool

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task/taskdir"
)

// Pool keeps the containers. A pooled container runs only its init, waiting for its task, with the
// default limits and a task folder of its own (workspace, input and code
// folders bound in). Refilling waits while tasks hold every admission slot,
// so that background work never competes with a full load; it never holds
// a slot itself, so it never delays a task's admission.
type Pool struct {
	cfg Config

	mu      sync.Mutex
	ready   map[Key][]*Warm
	runtime string // the OCI runtime the pool serves, once known
	// served are the keys as the last look found them, at servedAt.
	served   map[Key]Target
	servedAt time.Time
	// failing are the keys whose last prepare failed, backing off;
	// failures counts every failed prepare, for the metrics.
	failing  map[Key]*failure
	failures map[Key]uint64
	now      func() time.Time

	wake     chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
	stopped  chan struct{}
}

// Config is what the pool keeps and what it calls.
type Config struct {
	// Keys are the (image, runtime) pairs to keep ready, with the image's
	// name and how many; Busy says whether tasks hold every admission
	// slot.
	Keys func(context.Context) (map[Key]Target, error)
	Busy func() bool
	// Prepare makes one container for key, with its task folder.
	Prepare func(ctx context.Context, key Key, imageName string) (*Warm, error)
	Log     *slog.Logger
}

// Target is what the pool keeps of a key: Size containers of the image
// called Name.
type Target struct {
	Name string
	Size int
}

// Key is what a pooled container can serve.
type Key struct {
	Image   string // the image ID
	Runtime string
	Egress  bool // linked to the egress gateway, for allow-listed tasks
	// Preimport says its pre-started interpreter has loaded the image's
	// preimport modules, which only programs that load them are given.
	Preimport bool
}

// Warm is a pooled container and its task folder.
type Warm struct {
	ID        string
	Key       Key
	ImageName string
	Dir       *taskdir.Dir
	Container runtime.Prepared
	// Prestart is the interpreter the container started ahead of its
	// task, or nil.
	Prestart *runtime.Prestart
}

// failure is a key whose prepares fail: since the first of a row, the last
// reason, and when the next try is due.
type failure struct {
	since  time.Time
	reason string
	tries  int
	next   time.Time
}

// refillEvery is how often the pool looks for work when nothing wakes it.
const refillEvery = 2 * time.Second

// Backoff of a key whose prepares fail: each failure in a row doubles the
// wait, from the first to the last. A failing backend is then asked about
// twelve times an hour per key, not every few seconds for ever.
const (
	backoffFirst = time.Second
	backoffMax   = 5 * time.Minute
)

// backoff is the wait after tries failures in a row.
func backoff(tries int) time.Duration {
	d := backoffFirst
	for i := 1; i < tries && d < backoffMax; i++ {
		d *= 2
	}
	return min(d, backoffMax)
}

// New starts a pool that refills itself until Close.
func New(cfg Config) *Pool {
	p := build(cfg)
	go p.run()
	return p
}

// build is a pool that does not refill by itself until run.
func build(cfg Config) *Pool {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Pool{cfg: cfg, ready: map[Key][]*Warm{},
		failing: map[Key]*failure{}, failures: map[Key]uint64{}, now: time.Now,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
}

// Nudge wakes the pool to refill: a task ended, or took a container.
func (p *Pool) Nudge() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Refresh forgets what the pool found to serve and wakes it, so that it
// asks for the keys again (the catalog changed).
func (p *Pool) Refresh() {
	p.mu.Lock()
	p.served = nil
	p.mu.Unlock()
	p.Nudge()
}

func (p *Pool) run() {
	defer close(p.stopped)
	tick := time.NewTicker(refillEvery)
	defer tick.Stop()
	fresh := true
	for {
		p.fill(fresh)
		select {
		case <-p.stop:
			return
		case <-p.wake:
			fresh = false
		case <-tick.C:
			fresh = true
		}
	}
}

// serving asks for the keys the pool serves and notes their runtime,
// which claim compares. Every finished task wakes the pool: unless asked
// for fresh keys, within refillEvery of the last look it reuses what that
// look found rather than ask the backend about every image again (two API
// calls after each call of a session, on the path of the next).
func (p *Pool) serving(ctx context.Context, fresh bool) (map[Key]Target, error) {
	p.mu.Lock()
	served, at := p.served, p.servedAt
	p.mu.Unlock()
	if !fresh && served != nil && time.Since(at) < refillEvery {
		return served, nil
	}
	keys, err := p.cfg.Keys(ctx)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range keys {
		p.runtime = k.Runtime
		break
	}
	p.served, p.servedAt = keys, time.Now()
	return keys, nil
}

// fill prepares containers, one at a time, until every key has size ready,
// or no admission slot is free, or the pool stops; fresh asks the backend
// for the keys again (see serving).
func (p *Pool) fill(fresh bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-p.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	keys, err := p.serving(ctx, fresh)
	if err != nil {
		p.cfg.Log.Warn("pool: cannot tell what to prepare", "err", err)
		return
	}
	p.prune(keys)
	for ctx.Err() == nil {
		key, ok := p.neediest(keys)
		if !ok {
			return
		}
		if p.cfg.Busy() {
			return // tasks have every slot; a finished task wakes the pool
		}
		w, err := p.cfg.Prepare(ctx, key, keys[key].Name)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			p.failed(key, keys[key].Name, err)
			continue // the key backs off; the others are still served
		}
		p.mu.Lock()
		p.ready[key] = append(p.ready[key], w)
		p.mu.Unlock()
		p.recovered(key, keys[key].Name)
	}
}

// failed puts key in backoff after a failed prepare. Only the first failure
// of a row is logged: a daemon whose backend cannot start containers says so
// once, not on every try.
func (p *Pool) failed(key Key, imageName string, err error) {
	p.mu.Lock()
	now := p.now()
	f := p.failing[key]
	first := f == nil
	if first {
		f = &failure{since: now}
		p.failing[key] = f
	}
	f.tries++
	f.reason = err.Error()
	f.next = now.Add(backoff(f.tries))
	p.failures[key]++
	p.mu.Unlock()
	if first {
		p.cfg.Log.Error("pool for "+key.String(imageName)+" failing: its containers cannot be prepared; retrying with backoff",
			"image", imageName, "runtime", key.Runtime, "egress", key.Egress, "err", err)
	}
}

// recovered ends key's backoff after a prepare that worked, and says so
// when it was failing.
func (p *Pool) recovered(key Key, imageName string) {
	p.mu.Lock()
	f := p.failing[key]
	delete(p.failing, key)
	p.mu.Unlock()
	if f != nil {
		p.cfg.Log.Info("pool for "+key.String(imageName)+" recovered", "image", imageName, "runtime", key.Runtime, "egress", key.Egress,
			"failed_for", p.now().Sub(f.since).Round(time.Millisecond), "tries", f.tries)
	}
}

// String names the pool of key, whose image is called imageName.
func (k Key) String(imageName string) string {
	s := imageName + "/" + k.Runtime
	if k.Egress {
		s += " (egress)"
	}
	if k.Preimport {
		s += " (preimport)"
	}
	return s
}

// neediest is the key with the fewest ready containers of those below
// their size and not backing off.
func (p *Pool) neediest(keys map[Key]Target) (Key, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best Key
	found := false
	now := p.now()
	for k := range keys {
		if f := p.failing[k]; f != nil && now.Before(f.next) {
			continue
		}
		n := len(p.ready[k])
		if n < keys[k].Size && (!found || n < len(p.ready[best])) {
			best, found = k, true
		}
	}
	return best, found
}

// prune removes ready containers whose key is gone (an image rebuilt).
func (p *Pool) prune(keys map[Key]Target) {
	p.mu.Lock()
	var stale []*Warm
	for k, ws := range p.ready {
		if _, ok := keys[k]; !ok {
			stale = append(stale, ws...)
			delete(p.ready, k)
		}
	}
	for k := range p.failing {
		if _, ok := keys[k]; !ok {
			delete(p.failing, k)
		}
	}
	p.mu.Unlock()
	for _, w := range stale {
		p.discard(w)
	}
}

// removeTimeout bounds removing a container that serves no task.
const removeTimeout = 30 * time.Second

// discard removes a container that will serve no task.
func (p *Pool) discard(w *Warm) {
	ctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
	defer cancel()
	if err := w.Container.Remove(ctx); err != nil {
		p.cfg.Log.Warn("pool: remove a container", "err", err)
	}
	if err := w.Dir.Remove(); err != nil {
		p.cfg.Log.Warn("pool: remove a task folder", "err", err)
	}
}

// Claim takes a ready container for key, or says why there is none.
func (p *Pool) Claim(key Key) (*Warm, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runtime != "" && key.Runtime != p.runtime {
		return nil, fmt.Sprintf("the pool serves the default runtime %s, not %s", p.runtime, key.Runtime)
	}
	ws := p.ready[key]
	if len(ws) == 0 {
		return nil, "no pooled container was ready"
	}
	w := ws[0]
	p.ready[key] = ws[1:]
	// No refill now: making a container takes the backend more CPU than a
	// short task takes, and on a small host the two would share it. The
	// task's release (or its session's start) wakes the pool.
	return w, ""
}

// IsReady says whether every key has its size of containers ready.
func (p *Pool) IsReady(ctx context.Context) (bool, error) {
	keys, err := p.serving(ctx, true)
	if err != nil {
		return false, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range keys {
		if len(p.ready[k]) < keys[k].Size {
			return false, nil
		}
	}
	return true, nil
}

// Status is how full the pool is for one image and runtime.
type Status struct {
	Image   string
	Runtime string
	Ready   int
	Size    int
	// Egress says the containers are linked to the egress gateway, for
	// allow-listed tasks; Preimport that they pre-loaded the image's
	// preimport modules.
	Egress, Preimport bool
	// FailingSince, when not zero, is since when every prepare of this
	// pool failed; Failure is the last reason, Failures every failure
	// since the daemon started.
	FailingSince time.Time
	Failure      string
	Failures     uint64
}

// Status reports the pool of every key it serves; fresh asks the backend
// for the keys (see serving).
func (p *Pool) Status(ctx context.Context, fresh bool) ([]Status, error) {
	keys, err := p.serving(ctx, fresh)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Status
	for k, t := range keys {
		st := Status{Image: t.Name, Runtime: k.Runtime, Ready: len(p.ready[k]), Size: t.Size, Egress: k.Egress, Preimport: k.Preimport, Failures: p.failures[k]}
		if f := p.failing[k]; f != nil {
			st.FailingSince, st.Failure = f.since, f.reason
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b Status) int {
		if c := strings.Compare(a.Image, b.Image); c != 0 {
			return c
		}
		if c := cmp.Compare(boolInt(a.Egress), boolInt(b.Egress)); c != 0 {
			return c
		}
		return cmp.Compare(boolInt(a.Preimport), boolInt(b.Preimport))
	})
	return out, nil
}

// Close stops refilling and removes every ready container.
func (p *Pool) Close() {
	p.stopOnce.Do(func() { close(p.stop) })
	<-p.stopped
	p.mu.Lock()
	var all []*Warm
	for _, ws := range p.ready {
		all = append(all, ws...)
	}
	p.ready = map[Key][]*Warm{}
	p.mu.Unlock()
	for _, w := range all {
		p.discard(w)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
