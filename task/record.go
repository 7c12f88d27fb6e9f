package task

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/audit"
	"github.com/sandboxd/sandboxd/task/run"
)

// runRecord follows one Run for the log, the audit log and the metrics:
// accepted when its container starts, refused if it ends before, and its
// end.
type runRecord struct {
	s        *Service
	base     audit.Event
	language string
	asked    time.Time

	mu        sync.Mutex
	started   bool
	startedAt time.Time
}

// record follows the run of req, asked for with ctx.
func (s *Service) record(ctx context.Context, req run.Request) *runRecord {
	base := s.auditEvent(ctx)
	if s.auditLog != nil {
		base.RequestDigest = requestDigest(req) // a pass over the whole request
	}
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
	language := "command"
	if req.Program != nil {
		language = req.Program.Language
	}
	return &runRecord{s: s, base: base, language: language, asked: time.Now()}
}

// observer passes obs the run's events, noting its start.
func (r *runRecord) observer(obs run.Observer) run.Observer {
	return &recordObserver{Observer: obs, r: r}
}

type recordObserver struct {
	run.Observer
	r *runRecord
}

func (o *recordObserver) Network(ev run.NetworkEvent) error {
	return run.ForwardNetwork(o.Observer, ev)
}

func (o *recordObserver) Started(st run.Started) error {
	r := o.r
	r.mu.Lock()
	r.started, r.startedAt = true, time.Now()
	r.base.RunID, r.base.Image, r.base.ImageDigest, r.base.Runtime = st.RunID, st.Image, st.ImageDigest, st.Runtime
	lim := st.Limits
	r.base.Limits = &lim
	e := r.base
	r.mu.Unlock()
	if r.s.metrics != nil {
		r.s.metrics.active.Inc()
	}
	if r.s.auditLog != nil {
		e.Kind, e.Decision = audit.KindDecision, audit.Accepted
		r.s.audit(e)
	}
	return o.Observer.Started(st)
}

// end records how the run ended, or why it was refused.
func (r *runRecord) end(res run.Result, err error) {
	r.mu.Lock()
	e, started, startedAt := r.base, r.started, r.startedAt
	r.mu.Unlock()
	r.log(e, started, res, err)
	if m := r.s.metrics; m != nil {
		switch {
		case !started:
			m.refusals.WithLabelValues(errorCode(err), quotaOf(err), e.Tenant).Inc()
		case err != nil:
			m.active.Dec()
			m.runs.WithLabelValues(errorCode(err), e.Runtime, r.language, "unknown", e.Tenant).Inc()
		default:
			m.active.Dec()
			m.ended(r.language, e.Tenant, e.Runtime, startedAt.Sub(r.asked)-res.Queued, res)
		}
	}
	if r.s.auditLog == nil {
		return
	}
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
	r.s.audit(e)
}

// log writes the run's line: one at its end, with what an operator looks
// for (never its code or environment values); a refusal only at debug, as
// a busy daemon refuses many and counts them in its metrics.
func (r *runRecord) log(e audit.Event, started bool, res run.Result, err error) {
	switch {
	case !started:
		r.s.log.Debug("run refused", "tenant", e.Tenant, "language", r.language, "code", errorCode(err), "reason", errorReason(err))
	case err != nil:
		r.s.log.Warn("run failed", "run", e.RunID, "tenant", e.Tenant, "language", r.language, "image", e.Image,
			"runtime", e.Runtime, "code", errorCode(err), "err", errorReason(err))
	default:
		attrs := []any{"run", e.RunID, "tenant", e.Tenant, "language", r.language, "status", res.Status, "exit_code", res.ExitCode,
			"duration", res.Duration.Round(time.Microsecond), "start", res.Start, "image", e.Image, "runtime", e.Runtime}
		if e.SessionID != "" {
			attrs = append(attrs, "session", e.SessionID)
		}
		if res.BundleDigest != "" {
			attrs = append(attrs, "bundle", res.BundleDigest)
		}
		if e.Peer != "" {
			attrs = append(attrs, "peer", e.Peer)
		}
		r.s.log.Info("run ended", attrs...)
	}
}
