package task

import (
	"context"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/tools"
)

// runInSession runs a task as the next call of its session: in the
// session's container, after the session's running call, with an
// admission slot like any run, and leaves a bundle chained to the call
// before.
func (s *Service) runInSession(ctx context.Context, req run.Request, obs run.Observer) (run.Result, error) {
	if err := req.Validate(s.cfg.Bounds); err != nil {
		return run.Result{}, err
	}
	if err := checkCallOptions(req.Options); err != nil {
		return run.Result{}, err
	}
	sess, err := s.liveSession(ctx, req.Options.SessionID)
	if err != nil {
		return run.Result{}, err
	}
	p := sess.box.Plan
	if o := req.Options.Limits; o.Timeout != 0 || o.StdoutBytes != 0 || o.StderrBytes != 0 {
		l, err := s.cfg.Limits.Resolve(limits.Limits{Timeout: o.Timeout, StdoutBytes: o.StdoutBytes, StderrBytes: o.StderrBytes})
		if err != nil {
			return run.Result{}, err
		}
		p.Limits.Timeout, p.Limits.StdoutBytes, p.Limits.StderrBytes = l.Timeout, l.StdoutBytes, l.StderrBytes
	}
	if req.Options.Workdir != "" {
		p.Workdir, _ = run.ResolveWorkdir(req.Options.Workdir)
	}
	if err := s.resolveTools(access.CallerFrom(ctx), &p, req.Options); err != nil {
		return run.Result{}, err
	}
	p.Tools = append(p.Tools, tools.CallerToolNames(req.Caller.Tools)...)
	switch {
	case sess.box.InKernel(req):
		p.Argv = nil
	default:
		// The image stays the session's: a call's language picks only its
		// command, as that image runs it.
		image := p.Image
		in := req
		in.Options.Image = image
		if err := resolveProgram(s.Catalog(), &p, in); err != nil {
			return run.Result{}, err
		}
		if err := notCompiled(p.Language); err != nil {
			return run.Result{}, err
		}
		p.Image = image
	}
	if sess.box.InKernel(req) && req.Options.Stdin != nil {
		return run.Result{}, run.Invalid("options.stdin", "%s code in a %s session runs in its kernel, which has no stdin", req.Program.Language, req.Program.Language)
	}
	if sess.box.InKernel(req) && len(req.Options.Env) > 0 {
		return run.Result{}, run.Invalid("options.env", "%s code in a %s session runs in its kernel, whose environment is the session's: set env in CreateSession, or change it in the code", req.Program.Language, req.Program.Language)
	}

	return s.pipeline(ctx, req, p, sess.info.Tenant, obs, &inSession{s: s, sess: sess})
}
