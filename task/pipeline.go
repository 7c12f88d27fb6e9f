package task

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/exec"
	"github.com/sandboxd/sandboxd/task/pool"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
)

// source is where a run's container comes from, as the façade chooses it;
// package exec runs the program in it. Every run goes through the one
// pipeline below; what differs between sources is named here, and only
// here:
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
	// open, once the run is admitted, gives the job its id and its
	// container's image and runtime, and says where the program runs.
	open(ctx context.Context, j *exec.Job) (exec.Source, error)
	// after follows the run's end, once its slot is free and the registry
	// knows how it ended.
	after(r *exec.Run, res run.Result, err error)
	// entry says whether a drain refuses the run.
	entry() entry
}

// pipeline runs req, resolved as p, for tenant: in flight for Shutdown,
// past src's wait, admitted, registered for attachers, executed in src's
// container, and its events handed to obs.
func (s *Service) pipeline(ctx context.Context, req run.Request, p exec.Plan, tenant string, obs run.Observer, src source) (run.Result, error) {
	done, err := s.enter(src.entry())
	if err != nil {
		return run.Result{}, err
	}
	defer done()
	if err := s.audited(); err != nil {
		return run.Result{}, err
	}
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
	job := exec.Job{Tenant: tenant, Request: req, Plan: p, Observer: obs, Queued: time.Since(queuedAt),
		ToolGrants: access.CallerFrom(ctx).ToolGrants()}
	where, err := src.open(ctx, &job)
	if err != nil {
		return run.Result{}, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	live := s.runs.Add(job.ID, tenant, req.Options.Labels, cancel)
	r := s.ex.NewRun(ctx, cancel, job, s.runs, live)
	s.started.Add(1)
	res, err := r.Execute(where)
	// The program has ended (or never ran): its slot is free before the
	// caller has taken the output.
	free(res.Duration)
	s.runs.Finish(job.ID, res, err)
	src.after(r, res, err)
	if err != nil {
		return run.Result{}, err
	}
	if err := r.Deliver(s.cfg.StallTimeout); err != nil {
		return run.Result{}, err
	}
	return res, nil
}

// fresh gives a run a pooled container if one fits, or one made for it.
type fresh struct{ s *Service }

func (fresh) entry() entry { return newWork }

func (fresh) before(context.Context) (func(), error) { return func() {}, nil }

func (f fresh) open(ctx context.Context, j *exec.Job) (exec.Source, error) {
	s := f.s
	info, oci, err := s.checkRuntime(ctx, j.Plan.Runtime)
	if err != nil {
		return nil, err
	}
	img, imageName, err := s.image(ctx, access.CallerFrom(ctx), j.Plan.Image)
	if err != nil {
		return nil, err
	}
	j.Info, j.OCIRuntime, j.Image, j.ImageName = info, oci, img, imageName
	src := &exec.Fresh{}
	interp, cold, err := s.chooseInterpreter(*j)
	if err != nil {
		return nil, err
	}
	src.Interpreter = interp
	if src.ColdReason = s.coldReason(j.Plan); src.ColdReason == "" {
		src.ColdReason = cold
	}
	if src.ColdReason == "" {
		key := pool.Key{Image: img.ID, Runtime: oci.Name, Egress: j.Plan.Network.Mode == netpolicy.AllowList, Preimport: interp.InWarm && interp.Preloads()}
		src.Warm, src.ColdReason = s.pool.Claim(key)
		if src.Warm == nil && key.Preimport {
			// The program loads the modules itself, as in a fresh
			// interpreter: a container without them is still warm.
			key.Preimport = false
			src.Warm, src.ColdReason = s.pool.Claim(key)
		}
	}
	if src.Warm != nil {
		// Claimed, the container is the run's to remove, whatever happens.
		j.ID = src.Warm.ID
	} else if j.ID, err = run.NewID(s.cfg.Node); err != nil {
		return nil, err
	}
	s.active.Add(1)
	return src, nil
}

// after removes the container and folders in the background: Shutdown
// waits for them, the caller does not.
func (f fresh) after(r *exec.Run, _ run.Result, _ error) {
	s := f.s
	s.inflight.Add(1)
	go func() {
		defer s.inflight.Done()
		defer s.active.Add(-1)
		r.Cleanup()
	}()
}

// inSession gives a run the container of its session.
type inSession struct {
	s    *Service
	sess *liveSession
}

func (*inSession) entry() entry { return ongoing }

func (i *inSession) before(ctx context.Context) (func(), error) {
	if err := i.sess.take(ctx); err != nil {
		return nil, err
	}
	return i.sess.give, nil
}

func (i *inSession) open(_ context.Context, j *exec.Job) (exec.Source, error) {
	sess, box := i.sess, i.sess.box
	id, err := run.NewID(i.s.cfg.Node)
	if err != nil {
		return nil, err
	}
	j.ID, j.Image, j.ImageName, j.Info, j.OCIRuntime = id, box.Image, sess.info.Image, box.Info, box.OCIRuntime
	env := maps.Clone(box.Env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, j.Request.Options.Env)
	j.Request.Options.Env = env
	return &exec.Call{Session: box, Seq: sess.info.Calls + 1, ParentBundle: sess.info.LastBundle}, nil
}

// after counts the call in its session, or ends the session when its
// container broke, before the call (an error) or during it (a result).
func (i *inSession) after(r *exec.Run, res run.Result, err error) {
	sess := i.sess
	if err != nil {
		var broken exec.Broken
		if errors.As(err, &broken) {
			i.s.endSession(sess.info.ID, session.Failed, "its container failed: "+broken.Error())
		}
		return
	}
	if r.ContainerExited() {
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
