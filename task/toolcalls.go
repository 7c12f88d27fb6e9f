package task

import (
	"github.com/sandboxd/sandboxd/audit"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/taskdir"
	"github.com/sandboxd/sandboxd/task/tools"
)

// toolRun is the tool channel of r, which asked for tools: what the
// caller's tenant is granted, narrowed by the request, and the caller's
// own tools, within the daemon's limits, each call audited and counted.
func (e *executor) toolRun(r *execution) *tools.Channel {
	caller := access.CallerFrom(r.ctx)
	side := r.req.Caller
	return tools.NewChannel(r.ctx, tools.Config{
		Caller: side, Confirmer: side.Confirmer,
		Registry: e.tools, RunID: r.id, Tenant: r.tenant, Key: r.req.Options.IdempotencyKey,
		Grants: caller.ToolGrants(), Requested: r.plan.tools, Limits: e.toolLimits,
		Audit:   func(c tools.Call) { e.toolAudit(r.tenant, r.id, c) },
		Metrics: e.toolStats,
		Record:  r.plan.toolRecord, LiveReads: r.req.Options.LiveReadTools,
	})
}

// toolLibrary is what a program imports to call tools, in its code
// folder (docs/tools.md).
func toolLibrary() []taskdir.File {
	var files []taskdir.File
	for _, f := range tools.Library() {
		files = append(files, taskdir.File{Path: f.Path, Content: f.Content})
	}
	return files
}

// auditToolCall writes a line for a program's call of a tool: what it
// called, the digest of its arguments (never the arguments), the gates'
// decision, how it ended and how long it took.
func (s *Service) auditToolCall(tenant, runID string, c tools.Call) {
	if s.auditLog == nil {
		return
	}
	e := audit.Event{Kind: audit.KindToolCall, Tenant: tenant, RunID: runID, Tool: c.Tool, ArgumentsDigest: c.ArgumentsDigest,
		Decision: audit.Accepted, Status: c.Outcome, DurationMillis: c.DurationMillis}
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
