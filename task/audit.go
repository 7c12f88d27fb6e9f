package task

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/audit"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
	"github.com/sandboxd/sandboxd/task/tools"
)

// auditEvent is an event of the caller of ctx.
func (s *Service) auditEvent(ctx context.Context) audit.Event {
	c := access.CallerFrom(ctx)
	return audit.Event{Tenant: c.Name, Peer: c.Peer, Method: c.Method}
}

// recordSession logs and audits that a session was created, or why it
// was not.
func (s *Service) recordSession(ctx context.Context, info session.Info, err error) {
	if err != nil {
		s.auditDecision(ctx, audit.Event{SessionID: info.ID}, err)
		return
	}
	s.log.Info("session created", "session", info.ID, "tenant", info.Tenant, "language", info.Language, "image", info.Image,
		"runtime", info.Runtime, "start", info.Start)
	if s.auditLog == nil {
		return
	}
	e := s.auditEvent(ctx)
	e.Kind, e.SessionID, e.Session = audit.KindSession, info.ID, "created"
	s.audit(e)
}

// recordNetworkChange logs a change of a session's network policy, and
// audits it or its refusal.
func (s *Service) recordNetworkChange(ctx context.Context, id string, req netpolicy.Request, err error) {
	if err != nil {
		s.auditDecision(ctx, audit.Event{SessionID: id}, err)
		return
	}
	s.log.Info("session network changed", "session", id, "mode", req.Mode, "policy", req.Policy, "rules", len(req.Rules), "secrets", req.Secrets)
	if s.auditLog == nil {
		return
	}
	e := s.auditEvent(ctx)
	e.Kind, e.SessionID, e.Session = audit.KindSession, id, "network changed"
	s.audit(e)
}

// auditDecision records a request on a run or a session other than
// running one (see runRecord): e says what was asked, err why it was
// refused, if it was.
func (s *Service) auditDecision(ctx context.Context, e audit.Event, err error) {
	if s.auditLog == nil {
		return
	}
	c := s.auditEvent(ctx)
	e.Tenant, e.Peer, e.Method = c.Tenant, c.Peer, c.Method
	e.Kind, e.Decision = audit.KindDecision, audit.Accepted
	if err != nil {
		e.Decision, e.Code = audit.Refused, errorCode(err)
		e.Reason = strings.TrimPrefix(e.Reason+": "+errorReason(err), ": ")
	}
	s.audit(e)
}

// recordSessionEnd logs and audits that a session ended, and how.
func (s *Service) recordSessionEnd(info session.Info) {
	s.log.Info("session ended", "session", info.ID, "tenant", info.Tenant, "state", info.State, "reason", info.Reason,
		"calls", info.Calls)
	if s.auditLog == nil {
		return
	}
	s.audit(audit.Event{Kind: audit.KindSession, Tenant: info.Tenant, SessionID: info.ID,
		Session: strings.ToLower(string(info.State)), Reason: info.Reason})
}

// audit writes e. A log that cannot be written is the operator's to see:
// an ERROR line and sandboxd_audit_write_errors_total, and with
// AuditRequired, new work refused from then on (the log's chain cannot go
// on past a gap: a restart begins it again).
func (s *Service) audit(e audit.Event) {
	err := s.auditLog.Record(e)
	if err == nil {
		return
	}
	s.log.Error("audit log", "err", err)
	if s.metrics != nil {
		s.metrics.auditErrors.Inc()
	}
	s.auditErr.CompareAndSwap(nil, &err)
}

// audited refuses new work once the audit log could not be written, when
// the operator requires every run on record.
func (s *Service) audited() error {
	if !s.cfg.AuditRequired {
		return nil
	}
	if p := s.auditErr.Load(); p != nil {
		return errdefs.ErrUnavailable.WithMessage(fmt.Sprintf(
			"the audit log could not be written (%v), and this daemon runs nothing off the record (--audit-required): it refuses runs until the operator mends the log and restarts it", *p))
	}
	return nil
}

// requestDigest is the SHA-256 of the request as the service read it.
func requestDigest(req run.Request) string {
	b, err := json.Marshal(req)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// quotaOf names the quota a refusal met ("max-queued", a tenant's
// "max_queued", ...), or "" for any other error.
func quotaOf(err error) string {
	var busy *BusyError
	if errors.As(err, &busy) {
		return busy.Quota
	}
	return ""
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

// auditToolCall writes a line for a program's call of a tool: what it
// called, the digest of its arguments (never the arguments), the gates'
// decision, how it ended and how long it took.
func (s *Service) auditToolCall(tenant, runID string, c tools.Call) {
	if s.auditLog == nil {
		return
	}
	e := audit.Event{Kind: audit.KindToolCall, Tenant: tenant, RunID: runID, Tool: c.Tool, ArgumentsDigest: c.ArgumentsDigest,
		Decision: audit.Accepted, Status: c.Outcome, DurationMillis: c.DurationMillis, RecordedFrom: c.RecordedFrom}
	for _, g := range c.Gates {
		if g.Decision != "pass" {
			e.Decision, e.Code = audit.Refused, g.Gate
		}
	}
	if c.Outcome != tools.OutcomeOK {
		e.Reason = c.Error
	}
	s.audit(e)
}
