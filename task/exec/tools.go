package exec

import (
	"github.com/sandboxd/sandboxd/task/taskdir"
	"github.com/sandboxd/sandboxd/task/tools"
)

// channel is the tool channel of r: what the caller's tenant is granted,
// narrowed by the request, and the caller's own tools, within the
// daemon's limits, each call audited and counted.
func (e *Executor) channel(r *Run) *tools.Channel {
	side := r.Request.Caller
	return tools.NewChannel(r.ctx, tools.Config{
		Caller: side, Confirmer: side.Confirmer,
		Registry: e.cfg.Tools, RunID: r.ID, Tenant: r.Tenant, Key: r.Request.Options.IdempotencyKey,
		Grants: r.ToolGrants, Requested: r.Plan.Tools, Limits: e.cfg.ToolLimits,
		Audit: func(c tools.Call) {
			if e.cfg.ToolAudit != nil {
				e.cfg.ToolAudit(r.Tenant, r.ID, c)
			}
		},
		Metrics: e.cfg.ToolStats, LiveReads: r.Request.Options.LiveReadTools,
		Record: r.Plan.ToolRecord, RecordFrom: r.Plan.Replay.Of, RecordedSpecs: r.Plan.Replay.Specs,
	})
}

// ToolLibrary is what a program imports to call tools, in its code
// folder (docs/tools.md).
func ToolLibrary() []taskdir.File {
	var files []taskdir.File
	for _, f := range tools.Library() {
		files = append(files, taskdir.File{Path: f.Path, Content: f.Content})
	}
	return files
}
