package task

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/pool"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
)

// source is where a run's container comes from. Every run goes through
// the one pipeline below; what differs between sources is named here, and
// only here:
//
//   - fresh: a pooled container, or one made for the run. It counts as
//     active until its container is removed, which happens in the
//     background once the caller has the result.
//   - inSession: a session's container. A call waits for the session's
//     turn before admission; afterwards it updates the session, or ends it
//     when its container broke.
type source interface {
	// before runs ahead of admission; the returned func undoes it when
	// the run is over.
	before(ctx context.Context) (func(), error)
	// open, once the run is admitted, gives it its id and its container's
	// image, runtime and folders.
	open(ctx context.Context, r *execution) error
	// execute runs r in the container.
	execute(r *execution) (run.Result, error)
	// after follows the run's end, once its slot is free and the registry
	// knows how it ended.
	after(r *execution, res run.Result, err error)
	// entry says whether a drain refuses the run.
	entry() entry
}

// pipeline runs req, resolved as p, for tenant: in flight for Shutdown,
// past src's wait, admitted, registered for attachers, executed in src's
// container, and its events handed to obs.
func (s *Service) pipeline(ctx context.Context, req run.Request, p plan, tenant string, obs run.Observer, src source) (run.Result, error) {
	done, err := s.enter(src.entry())
	if err != nil {
		return run.Result{}, err
	}
	defer done()
	queuedAt := time.Now()
	leave, err := src.before(ctx)
	if err != nil {
		return run.Result{}, err
	}
	defer leave()
	release, err := s.admit(ctx)
	if err != nil {
		return run.Result{}, err
	}
	var freeOnce sync.Once
	free := func(ran time.Duration) { freeOnce.Do(func() { release(ran) }) }
	defer free(0)
	r := &execution{ex: s.ex, runs: s.runs, tenant: tenant, req: req, plan: p, obs: obs, queued: time.Since(queuedAt), killed: make(chan struct{})}
	if err := src.open(ctx, r); err != nil {
		return run.Result{}, err
	}
	var cancel context.CancelCauseFunc
	r.ctx, cancel = context.WithCancelCause(ctx)
	r.cancel = cancel
	defer cancel(nil)
	r.out = s.runs.Add(r.id, tenant, req.Options.Labels, cancel)
	s.started.Add(1)
	res, err := src.execute(r)
	// The program has ended (or never ran): its slot is free before the
	// caller has taken the output.
	free(res.Duration)
	s.runs.Finish(r.id, res, err)
	src.after(r, res, err)
	if err != nil {
		return run.Result{}, err
	}
	if r.emit != nil {
		// An Observer that failed means its caller is gone; one that
		// stalled is dropped.
		if err := r.emit.Finish(s.cfg.StallTimeout); errors.Is(err, context.DeadlineExceeded) {
			return run.Result{}, err
		}
	}
	return res, nil
}

// fresh gives a run a pooled container if one fits, or one made for it.
type fresh struct{ s *Service }

func (fresh) entry() entry { return newWork }

func (fresh) before(context.Context) (func(), error) { return func() {}, nil }

func (f fresh) open(ctx context.Context, r *execution) error {
	s := f.s
	info, oci, err := s.checkRuntime(ctx, r.plan.runtime)
	if err != nil {
		return err
	}
	img, imageName, err := s.image(ctx, access.CallerFrom(ctx), r.plan.image)
	if err != nil {
		return err
	}
	r.info, r.ociRuntime, r.image, r.imageName = info, oci, img, imageName
	interp, cold, err := s.chooseInterpreter(r)
	if err != nil {
		return err
	}
	r.interp = interp
	if r.coldReason = s.coldReason(r.plan); r.coldReason == "" {
		r.coldReason = cold
	}
	if r.coldReason == "" {
		key := pool.Key{Image: img.ID, Runtime: oci.Name, Egress: r.plan.network.Mode == netpolicy.AllowList, Preimport: interp.inWarm && interp.preloads()}
		r.warm, r.coldReason = s.pool.Claim(key)
		if r.warm == nil && key.Preimport {
			// The program loads the modules itself, as in a fresh
			// interpreter: a container without them is still warm.
			key.Preimport = false
			r.warm, r.coldReason = s.pool.Claim(key)
		}
	}
	if r.warm != nil {
		// Claimed, the container is the run's to remove, whatever happens.
		r.id, r.ctr = r.warm.ID, r.warm.Container
	} else if r.id, err = run.NewID(s.cfg.Node); err != nil {
		return err
	}
	s.active.Add(1)
	return nil
}

func (fresh) execute(r *execution) (run.Result, error) { return r.execute() }

// after removes the container and folders in the background: Shutdown
// waits for them, the caller does not.
func (f fresh) after(r *execution, _ run.Result, _ error) {
	s := f.s
	s.inflight.Add(1)
	go func() {
		defer s.inflight.Done()
		defer s.active.Add(-1)
		r.cleanup()
	}()
}

// inSession gives a run the container of its session.
type inSession struct {
	s    *Service
	sess *liveSession
}

func (inSession) entry() entry { return ongoing }

func (i inSession) before(ctx context.Context) (func(), error) {
	if err := i.sess.take(ctx); err != nil {
		return nil, err
	}
	return i.sess.give, nil
}

func (i inSession) open(_ context.Context, r *execution) error {
	sess := i.sess
	id, err := run.NewID(i.s.cfg.Node)
	if err != nil {
		return err
	}
	r.id, r.image, r.imageName, r.info, r.ociRuntime, r.ws = id, sess.image, sess.info.Image, sess.rtInfo, sess.oci, sess.ws
	r.req.Options.Env = mergeEnv(sess.env, r.req.Options.Env)
	return nil
}

func (i inSession) execute(r *execution) (run.Result, error) { return r.executeCall(i.sess) }

// after counts the call in its session, or ends the session when its
// container broke, before the call (an error) or during it (a result).
func (i inSession) after(r *execution, res run.Result, err error) {
	sess := i.sess
	if err != nil {
		var broken sessionBroken
		if errors.As(err, &broken) {
			i.s.endSession(sess.info.ID, session.Failed, "its container failed: "+broken.Error())
		}
		return
	}
	if r.containerExited {
		i.s.endSession(sess.info.ID, session.Failed, "its container ended during a call: "+res.Message)
		return
	}
	now := time.Now().UTC()
	i.s.sessions.Update(sess, func(info *session.Info) {
		info.Calls++
		info.LastUsedAt, info.IdleExpiresAt = now, now.Add(sess.idleTTL)
		if res.BundleDigest != "" {
			info.LastBundle = res.BundleDigest
		}
	})
}
