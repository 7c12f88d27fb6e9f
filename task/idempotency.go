package task

import (
	"context"
	"fmt"
	"sync"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/audit"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/registry"
	"github.com/sandboxd/sandboxd/task/run"
)

// keyedObserver binds a claim to its run's id when the run starts, before
// its caller hears of it.
type keyedObserver struct {
	run.Observer
	s *Service
	c *registry.Claim
}

func (o *keyedObserver) Started(st run.Started) error {
	if err := o.s.keys.Bind(o.c, st.RunID); err != nil {
		o.s.log.Error("idempotency key: record the run", "run", st.RunID, "tenant", o.c.Tenant, "err", err)
	}
	return o.Observer.Started(st)
}

func (o *keyedObserver) Network(ev run.NetworkEvent) error { return run.ForwardNetwork(o.Observer, ev) }

// runKeyed runs req once for its caller's idempotency key: the first call
// runs it, a retry of the same request follows that run (see Attach), and
// another request with the key is refused. The run outlives its caller, so
// that a retry after a dropped call finds it: only Cancel and the daemon's
// shutdown stop it.
func (s *Service) runKeyed(ctx context.Context, req run.Request, obs run.Observer) (run.Result, error) {
	if err := registry.CheckKey(req.Options.IdempotencyKey); err != nil {
		return run.Result{}, err
	}
	tenant := access.CallerFrom(ctx).Name
	// In a cluster one daemon owns each key, so that a retry balanced onto
	// another daemon finds the run rather than starting a second one.
	if owner, elsewhere, _ := s.peers.Owner(tenant + "\x00" + req.Options.IdempotencyKey); elsewhere && !sentHere(ctx) {
		return run.Result{}, &ElsewhereError{What: "idempotency key", ID: req.Options.IdempotencyKey, Peer: owner}
	}
	// A new key's end is written after its run: Shutdown waits for that
	// too, or a run that ended would be told LOST at the next start.
	leave, err := s.enter(ongoing)
	if err != nil {
		return run.Result{}, err
	}
	c, runID, err := s.keys.Take(ctx, tenant, req.Options.IdempotencyKey, requestDigest(req))
	if err != nil {
		leave()
		s.auditDecision(ctx, audit.Event{Reason: "idempotency key"}, err)
		return run.Result{}, err
	}
	if c == nil {
		leave()
		s.auditDecision(ctx, audit.Event{RunID: runID, Reason: "a retry with its idempotency key: follows the run"}, nil)
		if _, ok := s.runs.Get(runID); !ok {
			// Forgotten by the registry (it keeps the recent runs): the
			// key's file has the run.
			kept, rerr := s.keys.Lookup(tenant, req.Options.IdempotencyKey)
			if rerr != nil || kept == nil {
				return run.Result{}, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("run %s of the idempotency key is no longer kept", runID))
			}
			s.runs.Restore(*kept)
		}
		return s.Attach(ctx, runID, 0, 0, obs)
	}
	type ran struct {
		res run.Result
		err error
	}
	done := make(chan ran, 1)
	fwd := &forwarder{obs: obs}
	go func() {
		defer leave()
		res, err := s.runRecorded(context.WithoutCancel(ctx), req, &keyedObserver{Observer: fwd, s: s, c: c})
		rn, ok := s.runs.Get(c.RunID)
		if kerr := s.keys.End(c, rn, ok && c.RunID != ""); kerr != nil {
			s.log.Error("idempotency key: record the end", "run", c.RunID, "tenant", c.Tenant, "err", kerr)
		}
		done <- ran{res, err}
	}()
	select {
	case r := <-done:
		return r.res, r.err
	case <-ctx.Done():
		fwd.leave()
		return run.Result{}, context.Cause(ctx)
	}
}

// forwarder passes a run's events to its caller's Observer until the
// caller fails or leaves; the run goes on either way.
type forwarder struct {
	mu   sync.Mutex
	obs  run.Observer
	gone bool
}

func (f *forwarder) Started(st run.Started) error {
	return f.pass(func() error { return f.obs.Started(st) })
}

func (f *forwarder) Output(s run.Stream, p []byte) error {
	return f.pass(func() error { return f.obs.Output(s, p) })
}

func (f *forwarder) Network(ev run.NetworkEvent) error {
	return f.pass(func() error { return run.ForwardNetwork(f.obs, ev) })
}

func (f *forwarder) pass(send func() error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.gone && send() != nil {
		f.gone = true
	}
	return nil
}

// leave stops the events, once the one being passed is.
func (f *forwarder) leave() {
	f.mu.Lock()
	f.gone = true
	f.mu.Unlock()
}
