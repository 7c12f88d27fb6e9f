package task

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/task/run"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/pool"
	"github.com/sandboxd/sandboxd/task/taskdir"
)

// kernelScript is the Python kernel of sessions, started by the session
// container's init on its first Python call.
//
//go:embed kernel.py
var kernelScript string

// kernelLanguage is the language whose code runs in a session's kernel;
// code in other languages runs as a command of the session.
const kernelLanguage = "python"

// SessionRequest starts a session.
type SessionRequest struct {
	// Language picks the image, and the kernel for Python; empty means the
	// command image.
	Language string
	// Options are the session's: image, runtime, limits (timeout is each
	// call's default), network, files, mounts, env, workdir, labels, seed.
	Options run.Options
	// TTL and IdleTTL end the session; zero means the operator's maximum.
	TTL, IdleTTL time.Duration
}

// SessionState is where a session is in its life.
type SessionState string

// The states of a session.
const (
	SessionActive  SessionState = "ACTIVE"
	SessionDeleted SessionState = "DELETED"
	SessionExpired SessionState = "EXPIRED"
	SessionFailed  SessionState = "FAILED"
	SessionLost    SessionState = "LOST"
)

// SessionInfo describes a session.
type SessionInfo struct {
	ID          string            `json:"id"`
	State       SessionState      `json:"state"`
	Reason      string            `json:"reason,omitempty"`
	Language    string            `json:"language,omitempty"`
	Image       string            `json:"image"`
	ImageDigest string            `json:"image_digest"`
	Runtime     string            `json:"runtime"`
	Limits      limits.Limits     `json:"limits"`
	Labels      map[string]string `json:"labels,omitempty"`
	CreatedAt   time.Time         `json:"created_at"`
	LastUsedAt  time.Time         `json:"last_used_at"`
	// ExpiresAt is the end by TTL; IdleExpiresAt by idle TTL, from the
	// last call's end.
	ExpiresAt     time.Time     `json:"expires_at"`
	IdleExpiresAt time.Time     `json:"idle_expires_at"`
	Calls         int64         `json:"calls"`
	LastBundle    string        `json:"last_bundle,omitempty"`
	Start         run.StartPath `json:"start"`
	// Tenant is the caller that created it.
	Tenant string `json:"tenant,omitempty"`
}

// session is a live session: its container, folders and chain.
type session struct {
	info    SessionInfo
	idleTTL time.Duration
	plan    plan
	env     map[string]string
	req     SessionRequest
	image   runtime.Image
	rtInfo  runtime.Info
	oci     runtime.OCIRuntime
	ws      *taskdir.Dir
	ctr     runtime.Prepared
	calls   runtime.Session
	net     netpolicy.Session

	// turn is held by the running call: one at a time.
	turn chan struct{}
	// workspace is /workspace as the last call left it; uploads are the
	// files written into it since.
	workspace taskdir.Snapshot
	uploads   []upload
}

// sessions is the daemon's table of sessions, live and recently ended.
type sessions struct {
	mu    sync.Mutex
	live  map[string]*session
	ended map[string]SessionInfo
	order []string // ended, oldest first, to forget past keepEnded
	// starting counts the sessions being created, which count as live,
	// by tenant.
	starting map[string]int
	dir      string // where live sessions are recorded, to be told lost
}

// keepEnded is how many ended sessions GetSession still reports.
const keepEnded = 1000

func newSessions(dir string) *sessions {
	return &sessions{live: map[string]*session{}, ended: map[string]SessionInfo{}, starting: map[string]int{}, dir: dir}
}

// recover reports the sessions an earlier instance recorded as lost: their
// containers went with the reap.
func (t *sessions) recover() (lost []SessionInfo, err error) {
	if err := os.MkdirAll(t.dir, 0o700); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(t.dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		p := filepath.Join(t.dir, e.Name())
		var info SessionInfo
		if b, err := os.ReadFile(p); err == nil && json.Unmarshal(b, &info) == nil && info.ID != "" {
			info.State, info.Reason = SessionLost, "the daemon that held it restarted; its container was removed"
			t.remember(info)
			lost = append(lost, info)
		}
		if err := os.Remove(p); err != nil {
			return lost, err
		}
	}
	return lost, nil
}

func (t *sessions) record(info SessionInfo) error {
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(t.dir, info.ID+".json"), b, 0o600)
}

// remember keeps an ended session's info; the caller holds no lock.
func (t *sessions) remember(info SessionInfo) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ended[info.ID] = info
	t.order = append(t.order, info.ID)
	for len(t.order) > keepEnded {
		delete(t.ended, t.order[0])
		t.order = t.order[1:]
	}
}

// CreateSession starts a session from the pool, or from a container made
// for it.
func (s *Service) CreateSession(ctx context.Context, req SessionRequest) (info SessionInfo, err error) {
	defer func() { s.auditSession(ctx, info.ID, "created", err) }()
	if s.cfg.MaxSessions <= 0 {
		return SessionInfo{}, errdefs.ErrFailedPrecondition.WithMessage("sessions are off on this daemon (--max-sessions 0)")
	}
	o := req.Options
	if o.SessionID != "" {
		return SessionInfo{}, run.Invalid("options.session_id", "a session cannot be created inside another")
	}
	if o.Stdin != nil {
		return SessionInfo{}, run.Invalid("options.stdin", "a session has no stdin; give each call its own")
	}
	if req.TTL < 0 || req.TTL > s.cfg.SessionTTL {
		return SessionInfo{}, run.Invalid("ttl", "%v is not between 0 and the operator's maximum %v", req.TTL, s.cfg.SessionTTL)
	}
	if req.IdleTTL < 0 || req.IdleTTL > s.cfg.SessionIdleTTL {
		return SessionInfo{}, run.Invalid("idle_ttl", "%v is not between 0 and the operator's maximum %v", req.IdleTTL, s.cfg.SessionIdleTTL)
	}
	if err := o.Validate(s.cfg.Bounds); err != nil {
		return SessionInfo{}, err
	}
	p := plan{image: s.cfg.Catalog.CommandImage}
	if req.Language != "" {
		lang, err := s.language(req.Language)
		if err != nil {
			return SessionInfo{}, err
		}
		p.language, p.image = lang, lang.Image
	}
	if err := s.resolveOptions(access.CallerFrom(ctx), &p, o); err != nil {
		return SessionInfo{}, err
	}
	if _, ok := s.rt.(runtime.Preparer); !ok {
		return SessionInfo{}, errdefs.ErrFailedPrecondition.WithMessage("this backend cannot hold sessions")
	}
	if err := s.refuseIfDraining(); err != nil {
		return SessionInfo{}, err
	}
	done, err := s.enter()
	if err != nil {
		return SessionInfo{}, err
	}
	defer done()
	caller := access.CallerFrom(ctx)
	tenantMax := 0
	if caller.Tenant != nil {
		tenantMax = caller.Tenant.MaxSessions
	}
	switch s.sessions.reserve(caller.Name, s.cfg.MaxSessions, tenantMax) {
	case reserveDaemonFull:
		return SessionInfo{}, fmt.Errorf("%d sessions are live, the most this daemon holds (--max-sessions): %w", s.cfg.MaxSessions, errdefs.ErrResourceExhausted)
	case reserveTenantFull:
		return SessionInfo{}, &BusyError{Quota: quotaMaxSessions, Tenant: caller.Name, Limit: tenantMax, RetryAfter: time.Minute}
	}
	sess, err := s.openSession(ctx, req, p)
	if err != nil {
		s.sessions.unreserve(caller.Name)
		return SessionInfo{}, err
	}
	return sess.snapshotInfo(&s.sessions.mu), nil
}

// What reserve says.
const (
	reserved = iota
	reserveDaemonFull
	reserveTenantFull
)

// reserve counts a session of tenant about to start, when there is room
// for it on the daemon (max) and for the tenant (tenantMax, 0 for no bound
// of its own).
func (t *sessions) reserve(tenant string, max, tenantMax int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	starting := 0
	for _, n := range t.starting {
		starting += n
	}
	if len(t.live)+starting >= max {
		return reserveDaemonFull
	}
	if tenantMax > 0 {
		mine := t.starting[tenant]
		for _, sess := range t.live {
			if sess.info.Tenant == tenant {
				mine++
			}
		}
		if mine >= tenantMax {
			return reserveTenantFull
		}
	}
	t.starting[tenant]++
	return reserved
}

// unreserve forgets a session of tenant that did not start, or that is
// live now.
func (t *sessions) unreserve(tenant string) {
	t.mu.Lock()
	t.unreserveLocked(tenant)
	t.mu.Unlock()
}

func (t *sessions) unreserveLocked(tenant string) {
	if t.starting[tenant]--; t.starting[tenant] <= 0 {
		delete(t.starting, tenant)
	}
}

// openSession gets the session's container and makes it a session's.
func (s *Service) openSession(ctx context.Context, req SessionRequest, p plan) (_ *session, err error) {
	info, oci, err := s.checkRuntime(ctx, p.runtime)
	if err != nil {
		return nil, err
	}
	img, imageName, err := s.image(ctx, access.CallerFrom(ctx), p.image)
	if err != nil {
		return nil, err
	}
	id, err := newRunID(s.cfg.Node)
	if err != nil {
		return nil, err
	}
	sess := &session{
		plan: p, req: req, image: img, rtInfo: info, oci: oci, env: req.Options.Env, turn: make(chan struct{}, 1),
		idleTTL: cmp.Or(req.IdleTTL, s.cfg.SessionIdleTTL),
	}
	egress := p.network.Mode == netpolicy.AllowList
	sess.info.Start, sess.info.Tenant = run.StartCold, access.CallerFrom(ctx).Name
	if s.coldReason(p) == "" {
		if w, _ := s.pool.Claim(pool.Key{Image: img.ID, Runtime: oci.Name, Egress: egress}); w != nil {
			sess.ws, sess.ctr, id, sess.info.Start = w.Dir, w.Container, w.ID, run.StartWarm
		}
	}
	defer func() {
		if err != nil {
			s.closeSession(sess)
		}
	}()
	if sess.ctr == nil {
		if sess.ws, err = s.ex.newWorkspace(id, p.limits.DiskBytes, egress); err != nil {
			return nil, err
		}
		spec := s.ex.containerSpec(id, img.ID, oci.Name, sess.ws, p.limits)
		spec.Mounts = append(spec.Mounts, p.mounts...)
		spec.Env, spec.WorkingDir = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}, run.WorkspaceDir
		if sess.ctr, err = s.rt.(runtime.Preparer).Prepare(ctx, spec); err != nil {
			return nil, err
		}
	}
	host, ok := sess.ctr.(runtime.SessionHost)
	if !ok {
		return nil, errdefs.ErrFailedPrecondition.WithMessage("this backend's containers cannot hold sessions")
	}
	if err := sess.ws.WriteFiles(taskdir.Input, dirFiles(req.Options.Files)); err != nil {
		return nil, err
	}
	if err := sess.ws.MakeWorkdir(inWorkspace(p.workdir)); err != nil {
		return nil, err
	}
	if egress {
		if sess.net, err = s.ex.egress.Bind(sess.ws.Egress, p.network); err != nil {
			return nil, fmt.Errorf("bind the network policy: %w", err)
		}
	}
	lim := p.limits
	if sess.calls, err = host.OpenSession(ctx, s.cfg.resources(lim)); err != nil {
		return nil, err
	}
	if sess.workspace, err = taskdir.TakeSnapshot(sess.ws.Path(taskdir.Workspace), taskdir.Snapshot{}, s.cfg.Output); err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	sess.info = SessionInfo{
		ID: id, State: SessionActive, Language: req.Language, Image: imageName, ImageDigest: img.ID, Runtime: oci.Name,
		Limits: lim, Labels: req.Options.Labels, CreatedAt: now, LastUsedAt: now,
		ExpiresAt: now.Add(cmp.Or(req.TTL, s.cfg.SessionTTL)), IdleExpiresAt: now.Add(sess.idleTTL), Start: sess.info.Start,
		Tenant: sess.info.Tenant,
	}
	if err := s.sessions.record(sess.info); err != nil {
		return nil, fmt.Errorf("record the session: %w", err)
	}
	s.sessions.mu.Lock()
	s.sessions.unreserveLocked(sess.info.Tenant)
	s.sessions.live[id] = sess
	s.sessions.mu.Unlock()
	if sess.info.Start == run.StartWarm {
		s.pool.Nudge() // the session took a pooled container: refill
	}
	if p.language.Name == kernelLanguage {
		// The kernel starts now, while the caller writes its first call:
		// that call waits for the turn this start holds.
		sess.turn <- struct{}{}
		go func() {
			defer func() { <-sess.turn }()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			call := sess.kernelCall("", s.sessionEnv(sess, nil), p.workdir)
			call.Stdout, call.Stderr = discard{}, discard{}
			if _, err := sess.calls.Call(ctx, call); err != nil {
				s.log.Warn("start a session's kernel", "session", id, "err", err)
			}
		}()
	}
	return sess, nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// kernelCall is a call of code in the session's kernel. The script comes
// in the environment, which the kernel drops, rather than in argv, where
// every ps would print it.
func (sess *session) kernelCall(code string, env []string, workdir string) runtime.Call {
	return runtime.Call{
		Argv: []string{"python3", "-c", "import os; exec(os.environ.pop('SANDBOXD_KERNEL'))", "sandboxd-kernel"},
		Env:  append(slices.Clip(env), "SANDBOXD_KERNEL="+kernelScript), WorkingDir: workdir,
		Kernel: true, Code: code,
	}
}

// sessionEnv is a call's environment: the defaults, the session's, then
// the call's own.
func (s *Service) sessionEnv(sess *session, call map[string]string) []string {
	r := &execution{ex: s.ex, plan: sess.plan, req: run.Request{Options: run.Options{Env: sess.env}}}
	vars := r.envVars()
	for k, v := range call {
		vars[k] = v
	}
	return sortedEnv(vars)
}

// snapshotInfo copies the session's info under the table's lock.
func (sess *session) snapshotInfo(mu *sync.Mutex) SessionInfo {
	mu.Lock()
	defer mu.Unlock()
	return sess.info
}

// closeSession removes what a session holds: container, network binding,
// folders.
func (s *Service) closeSession(sess *session) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if sess.ctr != nil {
		if err := sess.ctr.Remove(ctx); err != nil {
			s.log.Error("remove a session's container", "session", sess.info.ID, "err", err)
		}
	}
	if sess.net != nil {
		sess.net.End()
	}
	if sess.ws != nil {
		if err := sess.ws.Remove(); err != nil {
			s.log.Error("remove a session's folder", "session", sess.info.ID, "err", err)
		}
	}
}

// endSession ends a live session in state, removing its container at once
// (a running call ends with it). It is false when the session is not live.
func (s *Service) endSession(id string, state SessionState, reason string) (SessionInfo, bool) {
	t := s.sessions
	t.mu.Lock()
	sess, ok := t.live[id]
	if ok {
		delete(t.live, id)
		sess.info.State, sess.info.Reason = state, reason
	}
	t.mu.Unlock()
	// Told ended before its container goes, so that a call never finds
	// it neither live nor ended.
	if !ok {
		return SessionInfo{}, false
	}
	t.remember(sess.info)
	s.auditSessionEnd(sess.info)
	s.closeSession(sess)
	_ = os.Remove(filepath.Join(t.dir, id+".json"))
	return sess.info, true
}

// GetSession reports a session of the caller's, live or ended.
func (s *Service) GetSession(ctx context.Context, id string) (SessionInfo, error) {
	info, _, ok := s.sessions.find(id)
	if !ok || !access.CallerFrom(ctx).Owns(info.Tenant) {
		return SessionInfo{}, s.unknownSession("", id)
	}
	return info, nil
}

// find reports a session, live (then with it) or ended.
func (t *sessions) find(id string) (SessionInfo, *session, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if sess, ok := t.live[id]; ok {
		return sess.info, sess, true
	}
	info, ok := t.ended[id]
	return info, nil, ok
}

// count is how many sessions are live.
func (t *sessions) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.live)
}

// ListSessions reports the caller's live sessions, oldest first.
func (s *Service) ListSessions(ctx context.Context) []SessionInfo {
	caller := access.CallerFrom(ctx)
	t := s.sessions
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]SessionInfo, 0, len(t.live))
	for _, sess := range t.live {
		if caller.Owns(sess.info.Tenant) {
			out = append(out, sess.info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// DeleteSession ends a session of the caller's; its container is removed
// before it returns.
func (s *Service) DeleteSession(ctx context.Context, id string) (SessionInfo, error) {
	if _, err := s.GetSession(ctx, id); err != nil {
		return SessionInfo{}, err
	}
	if info, ok := s.endSession(id, SessionDeleted, "deleted"); ok {
		return info, nil
	}
	return s.GetSession(ctx, id) // already ended: nothing to do
}

// expireSessions ends the sessions whose TTL or idle TTL passed; a session
// with a call running is idle only once the call ended.
func (s *Service) expireSessions(now time.Time) {
	t := s.sessions
	type due struct{ id, why string }
	var ends []due
	t.mu.Lock()
	for id, sess := range t.live {
		switch {
		case !now.Before(sess.info.ExpiresAt):
			ends = append(ends, due{id, "its TTL passed"})
		case !now.Before(sess.info.IdleExpiresAt) && len(sess.turn) == 0:
			ends = append(ends, due{id, "its idle TTL passed"})
		}
	}
	t.mu.Unlock()
	for _, e := range ends {
		if _, ok := s.endSession(e.id, SessionExpired, e.why); ok {
			s.log.Info("session expired", "session", e.id, "why", e.why)
		}
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
	t := s.sessions
	t.mu.Lock()
	ids := make([]string, 0, len(t.live))
	for id := range t.live {
		ids = append(ids, id)
	}
	t.mu.Unlock()
	for _, id := range ids {
		s.endSession(id, SessionDeleted, reason)
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
func (s *Service) liveSession(ctx context.Context, id string) (*session, error) {
	info, sess, ok := s.sessions.find(id)
	switch {
	case !ok || !access.CallerFrom(ctx).Owns(info.Tenant):
		return nil, s.unknownSession("options.session_id", id)
	case sess == nil:
		return nil, errdefs.ErrFailedPrecondition.WithMessage(fmt.Sprintf("session %q has ended (%s): %s", id, info.State, info.Reason))
	}
	return sess, nil
}

// errSessionBusy is what a call gets when ctx ends while it waits for the
// session's running call.
var errSessionBusy = errors.New("waiting for the session's running call")

// take waits for the session's turn.
func (sess *session) take(ctx context.Context) error {
	select {
	case sess.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", errSessionBusy, ctx.Err())
	}
}

func (sess *session) give() { <-sess.turn }

// inKernel says whether a request's program runs in the session's kernel.
func (sess *session) inKernel(req run.Request) bool {
	return req.Program != nil && req.Program.Language == kernelLanguage && sess.plan.language.Name == kernelLanguage
}
