package task

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task/taskdir"
)

// pool keeps containers started ahead of time, per (image, runtime), each
// for exactly one task: a task claims one, the pool forgets it, and the
// task removes it when done like a container made for it. Nothing of one
// task can reach the next.
//
// A pooled container runs only its init, waiting for its task, with the
// default limits and a task folder of its own (workspace, input and code
// folders bound in). Refilling waits while tasks hold every admission slot,
// so that background work never competes with a full load; it never holds
// a slot itself, so it never delays a task's admission.
type pool struct {
	ex *executor
	rt runtime.Preparer
	// size is how many containers to keep ready per key; egressSize for
	// the keys of allow-listed tasks.
	size, egressSize int
	// keys are the (image, runtime) pairs to keep ready, with the image's
	// name; busy says whether tasks hold every admission slot.
	keys func(context.Context) (map[poolKey]string, error)
	busy func() bool

	mu      sync.Mutex
	ready   map[poolKey][]*warm
	runtime string // the OCI runtime the pool serves, once known
	// served are the keys as the last look found them, at servedAt.
	served   map[poolKey]string
	servedAt time.Time
	// failing are the keys whose last prepare failed, backing off;
	// failures counts every failed prepare, for the metrics.
	failing  map[poolKey]*failure
	failures map[poolKey]uint64
	now      func() time.Time

	wake     chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
	stopped  chan struct{}
}

// poolKey is what a pooled container can serve.
type poolKey struct {
	image   string // the image ID
	runtime string
	egress  bool // linked to the egress gateway, for allow-listed tasks
}

// warm is a pooled container and its task folder.
type warm struct {
	id        string
	key       poolKey
	imageName string
	ws        *taskdir.Dir
	ctr       runtime.Prepared
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
// wait, from the first to the last. A failing engine is then asked about
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

func newPool(ex *executor, rt runtime.Preparer, size, egressSize int, keys func(context.Context) (map[poolKey]string, error), busy func() bool) *pool {
	p := makePool(ex, rt, size, egressSize, keys, busy)
	go p.run()
	return p
}

// makePool is a pool that does not refill by itself until run.
func makePool(ex *executor, rt runtime.Preparer, size, egressSize int, keys func(context.Context) (map[poolKey]string, error), busy func() bool) *pool {
	return &pool{ex: ex, rt: rt, size: size, egressSize: egressSize, keys: keys, busy: busy, ready: map[poolKey][]*warm{},
		failing: map[poolKey]*failure{}, failures: map[poolKey]uint64{}, now: time.Now,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
}

func (p *pool) nudge() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *pool) run() {
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
// look found rather than ask the engine about every image again (two API
// calls after each call of a session, on the path of the next).
func (p *pool) serving(ctx context.Context, fresh bool) (map[poolKey]string, error) {
	p.mu.Lock()
	served, at := p.served, p.servedAt
	p.mu.Unlock()
	if !fresh && served != nil && time.Since(at) < refillEvery {
		return served, nil
	}
	keys, err := p.keys(ctx)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range keys {
		p.runtime = k.runtime
		break
	}
	p.served, p.servedAt = keys, time.Now()
	return keys, nil
}

// fill prepares containers, one at a time, until every key has size ready,
// or no admission slot is free, or the pool stops; fresh asks the engine
// for the keys again (see serving).
func (p *pool) fill(fresh bool) {
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
		p.ex.log.Warn("pool: cannot tell what to prepare", "err", err)
		return
	}
	p.prune(keys)
	for ctx.Err() == nil {
		key, ok := p.neediest(keys)
		if !ok {
			return
		}
		if p.busy() {
			return // tasks have every slot; a finished task wakes the pool
		}
		w, err := p.prepare(ctx, key, keys[key])
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			p.failed(key, keys[key], err)
			continue // the key backs off; the others are still served
		}
		p.mu.Lock()
		p.ready[key] = append(p.ready[key], w)
		p.mu.Unlock()
		p.recovered(key, keys[key])
	}
}

// failed puts key in backoff after a failed prepare. Only the first failure
// of a row is logged: a daemon whose engine cannot start containers says so
// once, not on every try.
func (p *pool) failed(key poolKey, imageName string, err error) {
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
		p.ex.log.Error("pool for "+key.String(imageName)+" failing: its containers cannot be prepared; retrying with backoff",
			"image", imageName, "runtime", key.runtime, "egress", key.egress, "err", err)
	}
}

// recovered ends key's backoff after a prepare that worked, and says so
// when it was failing.
func (p *pool) recovered(key poolKey, imageName string) {
	p.mu.Lock()
	f := p.failing[key]
	delete(p.failing, key)
	p.mu.Unlock()
	if f != nil {
		p.ex.log.Info("pool for "+key.String(imageName)+" recovered", "image", imageName, "runtime", key.runtime, "egress", key.egress,
			"failed_for", p.now().Sub(f.since).Round(time.Millisecond), "tries", f.tries)
	}
}

// String names the pool of key, whose image is called imageName.
func (k poolKey) String(imageName string) string {
	s := imageName + "/" + k.runtime
	if k.egress {
		s += " (egress)"
	}
	return s
}

// neediest is the key with the fewest ready containers of those below
// their size and not backing off.
func (p *pool) neediest(keys map[poolKey]string) (poolKey, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best poolKey
	found := false
	now := p.now()
	for k := range keys {
		if f := p.failing[k]; f != nil && now.Before(f.next) {
			continue
		}
		n := len(p.ready[k])
		if n < p.sizeOf(k) && (!found || n < len(p.ready[best])) {
			best, found = k, true
		}
	}
	return best, found
}

func (p *pool) sizeOf(k poolKey) int {
	if k.egress {
		return p.egressSize
	}
	return p.size
}

// prune removes ready containers whose key is gone (an image rebuilt).
func (p *pool) prune(keys map[poolKey]string) {
	p.mu.Lock()
	var stale []*warm
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

// prepare makes one pooled container with the default limits.
func (p *pool) prepare(ctx context.Context, key poolKey, imageName string) (*warm, error) {
	id, err := newRunID(p.ex.cfg.Node)
	if err != nil {
		return nil, err
	}
	lim := p.ex.cfg.Limits.Default
	ws, err := p.ex.newWorkspace(id, lim.DiskBytes, key.egress)
	if err != nil {
		return nil, err
	}
	spec := p.ex.containerSpec(id, key.image, key.runtime, ws, lim)
	// The init waits in /workspace; the task brings its own environment.
	spec.Env, spec.WorkingDir = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}, workspaceDir
	ctr, err := p.rt.Prepare(ctx, spec)
	if err != nil {
		ws.Remove()
		return nil, err
	}
	return &warm{id: id, key: key, imageName: imageName, ws: ws, ctr: ctr}, nil
}

// discard removes a container that will serve no task.
func (p *pool) discard(w *warm) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := w.ctr.Remove(ctx); err != nil {
		p.ex.log.Warn("pool: remove a container", "err", err)
	}
	if err := w.ws.Remove(); err != nil {
		p.ex.log.Warn("pool: remove a task folder", "err", err)
	}
}

// claim takes a ready container for key, or says why there is none.
func (p *pool) claim(key poolKey) (*warm, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runtime != "" && key.runtime != p.runtime {
		return nil, fmt.Sprintf("the pool serves the default runtime %s, not %s", p.runtime, key.runtime)
	}
	ws := p.ready[key]
	if len(ws) == 0 {
		return nil, "no pooled container was ready"
	}
	w := ws[0]
	p.ready[key] = ws[1:]
	// No refill now: making a container takes the engine more CPU than a
	// short task takes, and on a small host the two would share it. The
	// task's release (or its session's start) wakes the pool.
	return w, ""
}

// isReady says whether every key has size containers ready.
func (p *pool) isReady(ctx context.Context) (bool, error) {
	keys, err := p.serving(ctx, true)
	if err != nil {
		return false, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range keys {
		if len(p.ready[k]) < p.sizeOf(k) {
			return false, nil
		}
	}
	return true, nil
}

// PoolStatus is how full the pool is for one image and runtime.
type PoolStatus struct {
	Image   string
	Runtime string
	Ready   int
	Size    int
	// Egress says the containers are linked to the egress gateway, for
	// allow-listed tasks.
	Egress bool
	// FailingSince, when not zero, is since when every prepare of this
	// pool failed; Failure is the last reason, Failures every failure
	// since the daemon started.
	FailingSince time.Time
	Failure      string
	Failures     uint64
}

// status reports the pool of every key it serves; fresh asks the engine
// for the keys (see serving).
func (p *pool) status(ctx context.Context, fresh bool) ([]PoolStatus, error) {
	keys, err := p.serving(ctx, fresh)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []PoolStatus
	for k, name := range keys {
		st := PoolStatus{Image: name, Runtime: k.runtime, Ready: len(p.ready[k]), Size: p.sizeOf(k), Egress: k.egress, Failures: p.failures[k]}
		if f := p.failing[k]; f != nil {
			st.FailingSince, st.Failure = f.since, f.reason
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b PoolStatus) int {
		if c := strings.Compare(a.Image, b.Image); c != 0 {
			return c
		}
		return cmp.Compare(boolInt(a.Egress), boolInt(b.Egress))
	})
	return out, nil
}

// close stops refilling and removes every ready container.
func (p *pool) close() {
	p.stopOnce.Do(func() { close(p.stop) })
	<-p.stopped
	p.mu.Lock()
	var all []*warm
	for _, ws := range p.ready {
		all = append(all, ws...)
	}
	p.ready = map[poolKey][]*warm{}
	p.mu.Unlock()
	for _, w := range all {
		p.discard(w)
	}
}

// poolKeys are the (image, runtime) pairs the pool keeps ready: every
// catalog image on the default runtime.
func (s *Service) poolKeys(ctx context.Context) (map[poolKey]string, error) {
	_, oci, err := s.checkRuntime(ctx, s.cfg.DefaultRuntime)
	if err != nil {
		return nil, err
	}
	keys := map[poolKey]string{}
	for _, name := range s.cfg.Catalog.Images {
		img, err := s.rt.Image(ctx, name)
		if err != nil || s.mayRun(img) != nil {
			continue
		}
		keys[poolKey{image: img.ID, runtime: oci.Name}] = name
		if s.egress != nil && s.cfg.Network.AllowsNetwork() && s.cfg.EgressPoolSize > 0 {
			keys[poolKey{image: img.ID, runtime: oci.Name, egress: true}] = name
		}
	}
	return keys, nil
}

// coldReason says why a request cannot run in a pooled container, or "".
// The rest (runtime, image) is for claim to find.
func (s *Service) coldReason(pl plan) string {
	switch {
	case s.pool == nil:
		return "the pool is off"
	case len(pl.mounts) > 0:
		return fmt.Sprintf("the request mounts %s, which pooled containers do not have", pl.mounts[0].Target)
	case pl.limits.DiskBytes != s.cfg.Limits.Default.DiskBytes:
		return "the request's disk size differs from the pool's"
	}
	return ""
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
