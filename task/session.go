package task

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/exec"
	"github.com/sandboxd/sandboxd/task/pool"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
)

// HasKernel says whether a session of language keeps its code's state in a
// kernel.
func HasKernel(language string) bool { return exec.HasKernel(language) }

// liveSession is a live session: its record and its container (box),
// whose calls take turns.
type liveSession struct {
	info    session.Info
	idleTTL time.Duration
	req     session.Request
	box     *exec.Session

	// turn is held by the running call: one at a time.
	turn chan struct{}
	// procs run beside the calls.
	procs processes
	// saved, while the session is paused, are the processes its
	// checkpoint holds, by the number its restore knows them by; under
	// procs.mu.
	saved map[uint32]*liveProcess
	// checkpointDigest is the paused session's checkpoint's digest,
	// which its resume checks (see digestDir); under procs.mu.
	checkpointDigest string
}

// CreateSession starts a session from the pool, or from a container made
// for it.
func (s *Service) CreateSession(ctx context.Context, req session.Request) (info session.Info, err error) {
	defer func() { s.recordSession(ctx, info, err) }()
	if s.cfg.MaxSessions <= 0 {
		return session.Info{}, errdefs.ErrFailedPrecondition.WithMessage("sessions are off on this daemon (--max-sessions 0)")
	}
	o := req.Options
	if o.SessionID != "" {
		return session.Info{}, run.Invalid("options.session_id", "a session cannot be created inside another")
	}
	if o.Stdin != nil {
		return session.Info{}, run.Invalid("options.stdin", "a session has no stdin; give each call its own")
	}
	if len(o.Tools) > 0 || len(o.ToolRecord) > 0 || o.LiveReadTools {
		return session.Info{}, run.Invalid("options.tools", "a session's calls each name the tools they may call, not the session")
	}
	if req.TTL < 0 || req.TTL > s.cfg.SessionTTL {
		return session.Info{}, run.Invalid("ttl", "%v is not between 0 and the operator's maximum %v", req.TTL, s.cfg.SessionTTL)
	}
	if req.IdleTTL < 0 || req.IdleTTL > s.cfg.SessionIdleTTL {
		return session.Info{}, run.Invalid("idle_ttl", "%v is not between 0 and the operator's maximum %v", req.IdleTTL, s.cfg.SessionIdleTTL)
	}
	if err := o.Validate(s.cfg.Bounds); err != nil {
		return session.Info{}, err
	}
	catalog := s.Catalog()
	p := exec.Plan{Image: catalog.CommandImage}
	if req.Language != "" {
		if err := resolveProgram(catalog, &p, run.Request{Program: &run.Program{Language: req.Language}, Options: o}); err != nil {
			return session.Info{}, err
		}
		if err := notCompiled(p.Language); err != nil {
			return session.Info{}, err
		}
		p.Argv = nil
	}
	if err := s.resolveOptions(catalog, access.CallerFrom(ctx), &p, o); err != nil {
		return session.Info{}, err
	}
	p.Channel = true
	if _, ok := s.rt.(runtime.Preparer); !ok {
		return session.Info{}, errdefs.ErrFailedPrecondition.WithMessage("this backend cannot hold sessions")
	}
	done, err := s.enter(newWork)
	if err != nil {
		return session.Info{}, err
	}
	defer done()
	if err := s.audited(); err != nil {
		return session.Info{}, err
	}
	caller := access.CallerFrom(ctx)
	tenantMax := 0
	if caller.Tenant != nil {
		tenantMax = caller.Tenant.MaxSessions
	}
	switch s.sessions.Reserve(caller.Name, s.cfg.MaxSessions, tenantMax) {
	case session.DaemonFull:
		return session.Info{}, fmt.Errorf("%d sessions are live, the most this daemon holds (--max-sessions): %w", s.cfg.MaxSessions, errdefs.ErrResourceExhausted)
	case session.TenantFull:
		return session.Info{}, &BusyError{Quota: quotaMaxSessions, Tenant: caller.Name, Limit: tenantMax, RetryAfter: time.Minute}
	}
	sess, err := s.openSession(ctx, req, p)
	if err != nil {
		s.sessions.Unreserve(caller.Name)
		return session.Info{}, err
	}
	return s.sessions.Info(sess), nil
}

// openSession gets the session's container and makes it a session's.
func (s *Service) openSession(ctx context.Context, req session.Request, p exec.Plan) (*liveSession, error) {
	info, oci, err := s.checkRuntime(ctx, p.Runtime)
	if err != nil {
		return nil, err
	}
	img, imageName, err := s.image(ctx, access.CallerFrom(ctx), p.Image)
	if err != nil {
		return nil, err
	}
	spec := exec.SessionSpec{Plan: p, Image: img, ImageName: imageName, Info: info, OCIRuntime: oci,
		Language: req.Language, Env: req.Options.Env, Files: req.Options.Files, Network: req.Options.Network}
	start := run.StartCold
	// A pooled container's pre-started interpreter, which the session's
	// init ends, may use more memory than a small session's limit.
	if s.coldReason(p) == "" && (p.Limits.MemoryBytes >= prestartMemoryFloor || s.pooledInterpreter(imageName) == nil) {
		if w, _ := s.pool.Claim(pool.Key{Image: img.ID, Runtime: oci.Name, Egress: p.Network.Mode == netpolicy.AllowList}); w != nil {
			spec.ID, spec.Warm, start = w.ID, w, run.StartWarm
		}
	}
	if spec.ID == "" {
		if spec.ID, err = run.NewID(s.cfg.Node); err != nil {
			return nil, err
		}
	}
	box, err := s.ex.OpenSession(ctx, spec)
	if err != nil {
		return nil, err
	}
	idleTTL := cmp.Or(req.IdleTTL, s.cfg.SessionIdleTTL)
	now := time.Now().UTC()
	sess := &liveSession{box: box, req: req, idleTTL: idleTTL, turn: make(chan struct{}, 1), info: session.Info{
		ID: spec.ID, State: session.Active, Language: req.Language, Image: imageName, ImageDigest: img.ID, Runtime: oci.Name,
		Limits: p.Limits, Labels: req.Options.Labels, CreatedAt: now, LastUsedAt: now,
		ExpiresAt: now.Add(cmp.Or(req.TTL, s.cfg.SessionTTL)), IdleExpiresAt: now.Add(idleTTL), Start: start,
		Tenant: access.CallerFrom(ctx).Name, Network: p.Network,
	}}
	if err := s.sessions.Add(sess); err != nil {
		box.Close()
		return nil, fmt.Errorf("record the session: %w", err)
	}
	if start == run.StartWarm {
		s.pool.Nudge() // the session took a pooled container: refill
	}
	if HasKernel(p.Language.Name) {
		// The kernel starts now, while the caller writes its first call:
		// that call waits for the turn this start holds.
		sess.turn <- struct{}{}
		go func() {
			defer func() { <-sess.turn }()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := box.StartKernel(ctx); err != nil {
				s.log.Warn("start a session's kernel", "session", spec.ID, "err", err)
			}
		}()
	}
	return sess, nil
}

// endSession ends a live session in state, removing its container at once
// (a running call ends with it). It is false when the session is not live.
func (s *Service) endSession(id string, state session.State, reason string) (session.Info, bool) {
	sess, info, ok := s.sessions.End(id, state, reason)
	if !ok {
		return session.Info{}, false
	}
	s.recordSessionEnd(info)
	s.ports.forget(sess)
	sess.box.Close()
	s.endPaused(sess)
	return info, true
}

// GetSession reports a session of the caller's, live or ended.
func (s *Service) GetSession(ctx context.Context, id string) (session.Info, error) {
	info, _, ok := s.sessions.Find(id)
	if !ok || !access.CallerFrom(ctx).Owns(info.Tenant) {
		return session.Info{}, s.unknownSession("", id)
	}
	return info, nil
}

// ListSessions reports the caller's live sessions, oldest first.
func (s *Service) ListSessions(ctx context.Context) []session.Info {
	caller := access.CallerFrom(ctx)
	return s.sessions.List(func(info session.Info) bool { return caller.Owns(info.Tenant) })
}

// DeleteSession ends a session of the caller's; its container is removed
// before it returns.
func (s *Service) DeleteSession(ctx context.Context, id string) (session.Info, error) {
	if _, err := s.GetSession(ctx, id); err != nil {
		return session.Info{}, err
	}
	if info, ok := s.endSession(id, session.Deleted, "deleted"); ok {
		return info, nil
	}
	return s.GetSession(ctx, id) // already ended: nothing to do
}

// UpdateSessionNetwork changes the network policy of a live allow-listed
// session of the caller's, between its calls: new connections are decided
// by the new policy at once, connections under way that it does not
// allow are cut, and the next call's bundle records the change, which
// replay makes again. Mode none takes every rule away (the container
// keeps its link to the gateway, which then refuses everything).
func (s *Service) UpdateSessionNetwork(ctx context.Context, id string, req netpolicy.Request) (info session.Info, err error) {
	defer func() { s.recordNetworkChange(ctx, id, req, err) }()
	sess, err := s.liveSession(ctx, id)
	if err != nil {
		return session.Info{}, err
	}
	if err := sess.take(ctx); err != nil {
		return session.Info{}, err
	}
	defer sess.give()
	cur := sess.box.Plan.Network
	if cur.Mode != netpolicy.AllowList {
		return session.Info{}, errdefs.ErrFailedPrecondition.WithMessage(fmt.Sprintf("network: session %s was created without network (mode none), so its container has no link to the egress gateway: create it with an allow-list to change its policy", id))
	}
	var p netpolicy.Policy
	switch req.Mode {
	case netpolicy.None:
		if req.Policy != "" || len(req.Rules) > 0 || len(req.Secrets) > 0 {
			return session.Info{}, run.Invalid("network.mode", "is none, which takes no policy, rules or secrets")
		}
		p = netpolicy.Policy{Mode: netpolicy.AllowList, Caps: cur.Caps}
	case netpolicy.AllowList:
		if p, err = s.resolveNetwork(access.CallerFrom(ctx), req); err != nil {
			return session.Info{}, err
		}
	default:
		return session.Info{}, run.Invalid("network.mode", "%q: a session's network changes to an allow-list, or to none", req.Mode)
	}
	if err := sess.box.SetNetwork(p, req); err != nil {
		return session.Info{}, err
	}
	s.sessions.Update(sess, func(info *session.Info) { info.Network = p })
	return s.sessions.Info(sess), nil
}

// expireSessions ends the sessions whose TTL or idle TTL passed; a session
// with a call running, or with a background process when the operator
// counts them, is idle only once it ended.
func (s *Service) expireSessions(now time.Time) {
	busy := func(sess *liveSession) bool {
		// A paused session does not idle: its TTL alone ends it.
		return len(sess.turn) != 0 || sess.info.State == session.Paused || s.cfg.ProcessesKeepAlive && sess.procs.running() > 0
	}
	for _, d := range s.sessions.Due(now, busy) {
		s.endSession(d.ID, session.Expired, d.Why)
	}
}

// sessionSweep is how often expiry is checked.
const sessionSweep = 250 * time.Millisecond

func (s *Service) sweepSessions(stop <-chan struct{}) {
	tick := time.NewTicker(sessionSweep)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-tick.C:
			s.expireSessions(now)
		}
	}
}

// endAllSessions ends every live session, at shutdown.
func (s *Service) endAllSessions(reason string) {
	for _, id := range s.sessions.IDs() {
		s.endSession(id, session.Deleted, reason)
	}
}

// checkCallOptions refuses what a call of a session cannot set: the rest
// is the session's.
func checkCallOptions(o run.Options) error {
	bad := func(field string) error {
		return run.Invalid("options."+field, "is the session's: set it in CreateSession")
	}
	switch {
	case o.Image != "":
		return bad("image")
	case o.Runtime != "":
		return bad("runtime")
	case o.Network.Mode != "" && o.Network.Mode != netpolicy.None || len(o.Network.Rules) > 0 || o.Network.Policy != "":
		return bad("network")
	case len(o.Files) > 0:
		return bad("files")
	case len(o.Mounts) > 0:
		return bad("mounts")
	case o.Seed != nil:
		return bad("seed")
	}
	l := o.Limits
	l.Timeout, l.StdoutBytes, l.StderrBytes = 0, 0, 0
	if l != (limits.Limits{}) {
		return run.Invalid("options.limits", "only timeout, stdout_bytes and stderr_bytes may be set for a call: the other limits are the session's")
	}
	return nil
}

// liveSession finds a live session of the caller's for a call.
func (s *Service) liveSession(ctx context.Context, id string) (*liveSession, error) {
	info, sess, ok := s.sessions.Find(id)
	switch {
	case !ok || !access.CallerFrom(ctx).Owns(info.Tenant):
		return nil, s.unknownSession("options.session_id", id)
	case sess == nil:
		return nil, errdefs.ErrFailedPrecondition.WithMessage(fmt.Sprintf("session %q has ended (%s): %s", id, info.State, info.Reason))
	case info.State == session.Paused:
		return nil, errdefs.ErrFailedPrecondition.WithMessage(fmt.Sprintf("session %q is paused: resume it (ResumeSession) first", id))
	}
	return sess, nil
}

// errSessionBusy is what a call gets when ctx ends while it waits for the
// session's running call.
var errSessionBusy = errors.New("waiting for the session's running call")

// take waits for the session's turn.
func (sess *liveSession) take(ctx context.Context) error {
	select {
	case sess.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", errSessionBusy, ctx.Err())
	}
}

func (sess *liveSession) give() { <-sess.turn }
