package task

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/audit"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
)

// A session's background processes run beside its calls, in its
// container, started by its init (never an engine exec). The engine keeps
// each one's record and the last bytes of its output, which callers read
// from offsets, long after the process ended, until the session ends.

// processes are a live session's background processes, oldest first.
type processes struct {
	mu   sync.Mutex
	list []*liveProcess
	last int
}

// liveProcess is a background process and what it wrote.
type liveProcess struct {
	id string
	// proc is the process in the session's container; a pause ends it
	// Saved, and the resume gives its next on resumed (nil: the paused
	// session ended). Under mu.
	proc        runtime.Process
	resumed     chan runtime.Process
	out, errOut *session.Log
	// wake gets a token when output comes or the process ends; ended is
	// closed once its end is recorded.
	wake  chan struct{}
	ended chan struct{}

	mu   sync.Mutex
	info session.ProcessInfo
}

// defaultTerm is the TERM of a terminal that names none: what the
// images' terminfo and most terminals speak.
const defaultTerm = "xterm-256color"

// termName is what a TERM may be.
var termName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$`)

// MaxProcessRead bounds one read of a process's output, each stream.
const MaxProcessRead = 1 << 20

// MaxProcessWait bounds how long a read waits for output to come.
const MaxProcessWait = 30 * time.Second

// StartProcess starts a background process in a session of the caller's.
func (s *Service) StartProcess(ctx context.Context, req session.ProcessRequest) (session.ProcessInfo, error) {
	check := run.Request{Command: &req.Command, Options: run.Options{Env: req.Env, Workdir: req.Workdir}}
	if err := check.Validate(s.cfg.Bounds); err != nil {
		return session.ProcessInfo{}, err
	}
	var size *runtime.WindowSize
	env := req.Env
	if t := req.Terminal; t != nil {
		if !termName.MatchString(cmp.Or(t.Term, defaultTerm)) {
			return session.ProcessInfo{}, run.Invalid("terminal.term", "%q is not a terminal's name such as xterm-256color", t.Term)
		}
		size = &runtime.WindowSize{Rows: cmp.Or(t.Rows, 24), Cols: cmp.Or(t.Cols, 80)}
		env = maps.Clone(env)
		if env == nil {
			env = map[string]string{}
		}
		env["TERM"] = cmp.Or(t.Term, defaultTerm)
	}
	sess, err := s.liveSession(ctx, req.SessionID)
	if err != nil {
		return session.ProcessInfo{}, err
	}
	workdir := sess.box.Plan.Workdir
	if req.Workdir != "" {
		workdir, _ = run.ResolveWorkdir(req.Workdir)
	}
	argv := req.Command.Argv
	if req.Command.Shell != "" {
		argv = []string{"/bin/sh", "-c", req.Command.Shell}
	}
	ps := &sess.procs
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if err := ps.makeRoom(s.cfg.SessionProcesses); err != nil {
		return session.ProcessInfo{}, err
	}
	wake := make(chan struct{}, 1)
	p := &liveProcess{out: session.NewLog(s.cfg.ProcessOutputBytes, wake), errOut: session.NewLog(s.cfg.ProcessOutputBytes, wake), wake: wake,
		ended: make(chan struct{}), resumed: make(chan runtime.Process, 1)}
	if p.proc, err = sess.box.Spawn(ctx, argv, env, workdir, size, p.out, p.errOut); err != nil {
		return session.ProcessInfo{}, err
	}
	ps.last++
	p.id = "p" + strconv.Itoa(ps.last)
	p.info = session.ProcessInfo{ID: p.id, SessionID: sess.info.ID, Argv: argv, Workdir: workdir,
		Terminal: size != nil, State: session.Running, StartedAt: time.Now().UTC()}
	ps.list = append(ps.list, p)
	sess.box.Record(artifacts.SessionEvent{At: p.info.StartedAt, Kind: artifacts.EventProcessStarted, Process: p.id, Argv: argv})
	go s.awaitProcess(sess, p)
	s.touchSession(sess)
	s.log.Info("process started", "session", sess.info.ID, "process", p.info.ID, "tenant", sess.info.Tenant)
	if s.auditLog != nil {
		e := s.auditEvent(ctx)
		e.Kind, e.SessionID, e.Session = audit.KindSession, sess.info.ID, "process "+p.info.ID+" started"
		s.audit(e)
	}
	return p.snapshot(), nil
}

// makeRoom forgets the oldest ended process when the session holds max.
func (ps *processes) makeRoom(max int) error {
	if len(ps.list) < max {
		return nil
	}
	for i, p := range ps.list {
		if p.snapshot().State != session.Running {
			ps.list = slices.Delete(ps.list, i, i+1)
			return nil
		}
	}
	return errdefs.ErrResourceExhausted.WithMessage(fmt.Sprintf("the session runs %d background processes, the most it may (--session-processes)", max))
}

// awaitProcess records the process's end.
func (s *Service) awaitProcess(sess *liveSession, p *liveProcess) {
	proc := p.current()
	<-proc.Done()
	exit := proc.Exit()
	for exit.Saved {
		// Paused: it goes on in the resumed container, or ends with the
		// paused session.
		if proc = <-p.resumed; proc == nil {
			exit = runtime.ProcessExit{Code: 128 + 9, SessionEnded: true, FinishedAt: time.Now()}
			break
		}
		p.mu.Lock()
		p.proc = proc
		p.mu.Unlock()
		<-proc.Done()
		exit = proc.Exit()
	}
	p.mu.Lock()
	p.info.State, p.info.ExitCode, p.info.EndedAt = session.Exited, exit.Code, exit.FinishedAt.UTC()
	if exit.SessionEnded {
		p.info.State = session.Killed
	}
	code := p.info.ExitCode
	p.mu.Unlock()
	sess.box.Record(artifacts.SessionEvent{At: exit.FinishedAt.UTC(), Kind: artifacts.EventProcessEnded, Process: p.id, ExitCode: &code})
	close(p.ended)
	select {
	case p.wake <- struct{}{}:
	default:
	}
	// Its end is the session's last use, when its running kept the
	// session from idling.
	if s.cfg.ProcessesKeepAlive {
		s.touchSession(sess)
	}
}

// current is the process in the session's container now.
func (p *liveProcess) current() runtime.Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.proc
}

// snapshot is the process's record now.
func (p *liveProcess) snapshot() session.ProcessInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	info := p.info
	info.StdoutBytes, info.StderrBytes = p.out.Total(), p.errOut.Total()
	return info
}

// running counts the session's running background processes.
func (ps *processes) running() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	n := 0
	for _, p := range ps.list {
		if p.snapshot().State == session.Running {
			n++
		}
	}
	return n
}

// touchSession counts now as the session's last use.
func (s *Service) touchSession(sess *liveSession) {
	now := time.Now().UTC()
	s.sessions.Update(sess, func(info *session.Info) {
		info.LastUsedAt, info.IdleExpiresAt = now, now.Add(sess.idleTTL)
	})
}

// process finds a background process of a live session of the caller's.
func (s *Service) process(ctx context.Context, sessionID, id string) (*liveSession, *liveProcess, error) {
	sess, err := s.liveSession(ctx, sessionID)
	if err != nil {
		return nil, nil, err
	}
	sess.procs.mu.Lock()
	defer sess.procs.mu.Unlock()
	for _, p := range sess.procs.list {
		if p.id == id {
			return sess, p, nil
		}
	}
	return nil, nil, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("process_id: session %q has no process %q", sessionID, id))
}

// ListProcesses reports a session's background processes, running and
// ended, oldest first.
func (s *Service) ListProcesses(ctx context.Context, sessionID string) ([]session.ProcessInfo, error) {
	sess, err := s.liveSession(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	sess.procs.mu.Lock()
	defer sess.procs.mu.Unlock()
	out := make([]session.ProcessInfo, 0, len(sess.procs.list))
	for _, p := range sess.procs.list {
		out = append(out, p.snapshot())
	}
	return out, nil
}

// ReadProcessOutput reads a process's output from offsets, at most limit
// bytes a stream (MaxProcessRead when 0). When nothing came past them yet
// and the process runs, it waits up to wait for something to come.
func (s *Service) ReadProcessOutput(ctx context.Context, sessionID, id string, from session.Offsets, limit int, wait time.Duration) (session.Output, error) {
	switch {
	case from.Stdout < 0 || from.Stderr < 0:
		return session.Output{}, run.Invalid("offsets", "%d and %d: an offset is not negative", from.Stdout, from.Stderr)
	case limit < 0 || limit > MaxProcessRead:
		return session.Output{}, run.Invalid("max_bytes", "%d is not between 0 and %d", limit, MaxProcessRead)
	case wait < 0 || wait > MaxProcessWait:
		return session.Output{}, run.Invalid("wait", "%v is not between 0 and %v", wait, MaxProcessWait)
	}
	if limit == 0 {
		limit = MaxProcessRead
	}
	sess, p, err := s.process(ctx, sessionID, id)
	if err != nil {
		return session.Output{}, err
	}
	s.touchSession(sess)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		info := p.snapshot()
		if info.StdoutBytes > from.Stdout || info.StderrBytes > from.Stderr || info.State != session.Running || wait == 0 {
			var o session.Output
			o.Info = info
			o.Stdout, o.Start.Stdout, o.Next.Stdout = p.out.Read(from.Stdout, limit)
			o.Stderr, o.Start.Stderr, o.Next.Stderr = p.errOut.Read(from.Stderr, limit)
			return o, nil
		}
		select {
		case <-p.wake:
		case <-timer.C:
			wait = 0
		case <-ctx.Done():
			return session.Output{}, ctx.Err()
		}
	}
}

// WriteProcessStdin writes to a running process's stdin, then closes it
// when asked.
func (s *Service) WriteProcessStdin(ctx context.Context, sessionID, id string, data []byte, closeAfter bool) error {
	if len(data) > int(s.cfg.Bounds.StdinBytes) {
		return run.Invalid("data", "is %d bytes, above the limit of %d", len(data), s.cfg.Bounds.StdinBytes)
	}
	sess, p, err := s.process(ctx, sessionID, id)
	if err != nil {
		return err
	}
	if p.snapshot().State != session.Running {
		return errdefs.ErrFailedPrecondition.WithMessage(fmt.Sprintf("process %q has ended", id))
	}
	s.touchSession(sess)
	if len(data) > 0 {
		if err := p.current().WriteStdin(data); err != nil {
			return err
		}
	}
	if closeAfter {
		return p.current().CloseStdin()
	}
	return nil
}

// SignalProcess sends a signal to a running process's process group.
func (s *Service) SignalProcess(ctx context.Context, sessionID, id string, signal int) (session.ProcessInfo, error) {
	if signal < 1 || signal > 64 {
		return session.ProcessInfo{}, run.Invalid("signal", "%d is not a signal number (1-64)", signal)
	}
	sess, p, err := s.process(ctx, sessionID, id)
	if err != nil {
		return session.ProcessInfo{}, err
	}
	s.touchSession(sess)
	if err := p.current().Signal(signal); err != nil {
		return session.ProcessInfo{}, err
	}
	return p.snapshot(), nil
}

// ResizeProcess changes the size of a process's terminal.
func (s *Service) ResizeProcess(ctx context.Context, sessionID, id string, rows, cols uint16) error {
	if rows == 0 || cols == 0 {
		return run.Invalid("terminal", "%d rows by %d columns: neither may be 0", rows, cols)
	}
	sess, p, err := s.process(ctx, sessionID, id)
	if err != nil {
		return err
	}
	if !p.snapshot().Terminal {
		return errdefs.ErrFailedPrecondition.WithMessage(fmt.Sprintf("process %q has no terminal", id))
	}
	s.touchSession(sess)
	return p.current().Resize(runtime.WindowSize{Rows: rows, Cols: cols})
}

// WaitProcess waits for a process to end, or for ctx, and reports it.
func (s *Service) WaitProcess(ctx context.Context, sessionID, id string) (session.ProcessInfo, error) {
	_, p, err := s.process(ctx, sessionID, id)
	if err != nil {
		return session.ProcessInfo{}, err
	}
	select {
	case <-p.ended:
		return p.snapshot(), nil
	case <-ctx.Done():
		return session.ProcessInfo{}, ctx.Err()
	}
}
