package task

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/audit"
)

// auditedRun records a run in the audit log: accepted when its container
// starts, refused if it ends before, and its end.
type auditedRun struct {
	s    *Service
	base audit.Event

	mu      sync.Mutex
	started bool
}

// auditRun is the record of req, asked for with ctx.
func (s *Service) auditRun(ctx context.Context, req Request) *auditedRun {
	base := s.auditEvent(ctx)
	base.RequestDigest = requestDigest(req)
	base.SessionID = req.Options.SessionID
	base.Image, base.Runtime = req.Options.Image, req.Options.Runtime
	base.Network = string(req.Options.Network.Mode)
	for _, r := range req.Options.Network.Rules {
		base.NetworkRules = append(base.NetworkRules, r.String())
	}
	if req.Options.Network.Policy != "" {
		base.NetworkRules = append(base.NetworkRules, "policy:"+req.Options.Network.Policy)
	}
	base.EnvNames = slices.Sorted(maps.Keys(req.Options.Env))
	return &auditedRun{s: s, base: base}
}

// observer passes obs the run's events, recording its start.
func (a *auditedRun) observer(obs Observer) Observer { return &auditObserver{Observer: obs, a: a} }

type auditObserver struct {
	Observer
	a *auditedRun
}

func (o *auditObserver) Started(st Started) error {
	a := o.a
	a.mu.Lock()
	a.started = true
	a.base.RunID, a.base.Image, a.base.ImageDigest, a.base.Runtime = st.RunID, st.Image, st.ImageDigest, st.Runtime
	lim := st.Limits
	a.base.Limits = &lim
	e := a.base
	a.mu.Unlock()
	e.Kind, e.Decision = audit.KindDecision, audit.Accepted
	a.s.record(e)
	return o.Observer.Started(st)
}

// end records how the run ended, or why it was refused.
func (a *auditedRun) end(res Result, err error) {
	a.mu.Lock()
	e, started := a.base, a.started
	a.mu.Unlock()
	switch {
	case !started:
		e.Kind, e.Decision = audit.KindDecision, audit.Refused
		e.Code, e.Reason = errorCode(err), errorReason(err)
	case err != nil:
		e.Kind, e.Status, e.Reason = audit.KindRunEnd, errorCode(err), err.Error()
	default:
		e.Kind, e.Status, e.BundleDigest = audit.KindRunEnd, string(res.Status), res.BundleDigest
		e.Reason = res.Message
	}
	a.s.record(e)
}

// auditEvent is an event of the caller of ctx.
func (s *Service) auditEvent(ctx context.Context) audit.Event {
	c := CallerFrom(ctx)
	return audit.Event{Tenant: c.Name, Peer: c.Peer, Method: c.Method}
}

// auditSession records a decision on a session, or what happened to it.
func (s *Service) auditSession(ctx context.Context, id, event string, err error) {
	if s.cfg.Audit == nil {
		return
	}
	e := s.auditEvent(ctx)
	e.SessionID = id
	if err != nil {
		e.Kind, e.Decision, e.Code, e.Reason = audit.KindDecision, audit.Refused, errorCode(err), errorReason(err)
	} else {
		e.Kind, e.Session = audit.KindSession, event
	}
	s.record(e)
}

// auditSessionEnd records that a session ended, and how.
func (s *Service) auditSessionEnd(info SessionInfo) {
	if s.cfg.Audit == nil {
		return
	}
	s.record(audit.Event{Kind: audit.KindSession, Tenant: info.Tenant, SessionID: info.ID,
		Session: strings.ToLower(string(info.State)), Reason: info.Reason})
}

// record writes e; a log that cannot be written is the operator's to see,
// and does not stop runs.
func (s *Service) record(e audit.Event) {
	if err := s.cfg.Audit.Record(e); err != nil {
		s.log.Error("audit log", "err", err)
	}
}

// requestDigest is the SHA-256 of the request as the service read it.
func requestDigest(req Request) string {
	b, err := json.Marshal(req)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// errorCode names err's class as the API does.
func errorCode(err error) string {
	var busy *BusyError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &busy), errdefs.IsResourceExhausted(err):
		return "RESOURCE_EXHAUSTED"
	case errdefs.IsInvalidArgument(err):
		return "INVALID_ARGUMENT"
	case errdefs.IsNotFound(err):
		return "NOT_FOUND"
	case errdefs.IsAlreadyExists(err):
		return "ALREADY_EXISTS"
	case errdefs.IsPermissionDenied(err):
		return "PERMISSION_DENIED"
	case errdefs.IsUnauthorized(err):
		return "UNAUTHENTICATED"
	case errdefs.IsFailedPrecondition(err), errdefs.IsConflict(err):
		return "FAILED_PRECONDITION"
	case errdefs.IsUnavailable(err):
		return "UNAVAILABLE"
	case errdefs.IsCanceled(err):
		return "CANCELLED"
	case errdefs.IsDeadlineExceeded(err):
		return "DEADLINE_EXCEEDED"
	}
	return "INTERNAL"
}

// errorReason is err's message on one line.
func errorReason(err error) string {
	if err == nil {
		return ""
	}
	return strings.ReplaceAll(err.Error(), "\n", " ")
}
