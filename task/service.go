// Package task is the engine of sandboxd, its façade: it takes a request,
// validates it, resolves it against the operator's policy and the
// caller's tenant (limits, images, runtimes, mounts, network, quotas),
// admits it fairly among tenants, and chooses its container: a pooled one,
// one made for it, or the container of a session (sessions keep one
// container, and a Python kernel, across calls). Package exec, the floor
// below, runs it there: its output under caps, its end classified, its
// outputs collected, its bundle written, and everything it made removed.
//
// Runs are kept in a registry that callers attach to by id and offsets;
// idempotency keys make a retried run the same run, across restarts; runs
// and sessions of another daemon are answered with where they live. Every
// decision and end goes to the audit log and the metrics.
//
// The protocol edges (gRPC, MCP) convert to and from this package's types;
// nothing here knows about them.
package task

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/audit"
	"github.com/sandboxd/sandboxd/cluster"
	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/exec"
	"github.com/sandboxd/sandboxd/task/hostuid"
	"github.com/sandboxd/sandboxd/task/pool"
	"github.com/sandboxd/sandboxd/task/registry"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
	"github.com/sandboxd/sandboxd/task/taskdir"
	"github.com/sandboxd/sandboxd/task/tools"
)

// Labels that mark the containers of a daemon instance.
const (
	LabelInstance = exec.LabelInstance
	LabelRun      = exec.LabelRun
)

// Service runs tasks.
type Service struct {
	rt        runtime.Runtime
	cfg       Config
	log       *slog.Logger
	disk      taskdir.Disk
	ex        *exec.Executor
	uids      *hostuid.Allocator
	admission *admission
	rates     access.Rates
	runs      *registry.Runs
	tasks     string // StateDir/tasks

	pool *pool.Pool
	// sessions are the live and recently ended sessions; sweepStop ends
	// their expiry.
	sessions *session.Table[liveSession]
	// ports are the sessions' opened ports, by their token's digest.
	ports ports
	keys  *registry.Keys
	// judgements are the judgements of idempotency keys.
	judgements *judged
	sweepStop  chan struct{}
	sweepOnce  sync.Once
	// egress is the gateway of allow-listed tasks; nil allows none.
	egress exec.Egress
	// The collaborators of the Options; each may be nil.
	store    *artifacts.Store
	auditLog *audit.Log
	// auditErr is the first audit write's error: the log's chain stops
	// there (audit.Log.Record).
	auditErr atomic.Pointer[error]
	lockFile *images.LockFile
	// catalog is the catalog requests are resolved against now: Config's
	// until SetCatalog.
	catalog    atomic.Pointer[images.Catalog]
	registerer prometheus.Registerer
	signing    Signer
	// tools are the operator's tool providers; toolLimits bound a run's
	// calls.
	tools      *tools.Registry
	toolLimits tools.Limits
	peers      *cluster.Peers

	// started counts the runs that got a container, and active those not
	// yet cleaned up, for Activity.
	started atomic.Uint64
	active  atomic.Int64
	// metrics are set when WithMetrics is given.
	metrics *metrics

	mu       sync.Mutex
	closing  bool
	draining bool
	// entered counts the calls between enter and their done: what Drain
	// waits for, queued runs and containers being made included.
	entered  int
	info     *runtime.Info
	infoAt   time.Time
	inflight sync.WaitGroup
}

// Option configures a Service.
type Option func(*Service)

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(s *Service) { s.log = l }
}

// WithArtifacts stores every run's bundle in store (default: none;
// sandboxd serve always sets it).
func WithArtifacts(store *artifacts.Store) Option {
	return func(s *Service) { s.store = store }
}

// Signer signs bundles and has the public halves of its keys.
type Signer interface {
	artifacts.Signer
	PublicKeys() []string
}

// WithSigning signs every bundle the store (WithArtifacts) keeps, and
// reports the keys' public halves in the inventory.
func WithSigning(keys Signer) Option {
	return func(s *Service) { s.signing = keys }
}

// WithAudit writes a line per decision on a run or a session, per run end
// and per session event to log (see package audit).
func WithAudit(log *audit.Log) Option {
	return func(s *Service) { s.auditLog = log }
}

// WithLock lets images run by the digests the lock records as built, read
// again when it changes; ListImages reports drift against it.
func WithLock(lock *images.LockFile) Option {
	return func(s *Service) { s.lockFile = lock }
}

// WithMetrics registers the service's Prometheus metrics with reg.
func WithMetrics(reg prometheus.Registerer) Option {
	return func(s *Service) { s.registerer = reg }
}

// WithTools lets programs call the tools of reg's providers, within lim
// (see docs/tools.md).
func WithTools(reg *tools.Registry, lim tools.Limits) Option {
	return func(s *Service) { s.tools, s.toolLimits = reg, lim }
}

// WithPeers, in a cluster, names the other daemons: a run or session that
// one of them holds is answered with an ElsewhereError naming it.
func WithPeers(peers *cluster.Peers) Option {
	return func(s *Service) { s.peers = peers }
}

// WithEgress gives allow-listed tasks the egress gateway e.
func WithEgress(e exec.Egress) Option {
	return func(s *Service) { s.egress = e }
}

// WithDisk sets what makes each task's writable folder (default
// TmpfsDisk).
func WithDisk(d taskdir.Disk) Option {
	return func(s *Service) { s.disk = d }
}

// ErrShuttingDown refuses what goes on while the daemon stops (a
// session's call): new runs and sessions get a DrainingError.
var ErrShuttingDown = errdefs.ErrUnavailable.WithMessage("sandboxd is shutting down")

// New returns a Service that runs tasks on rt. It checks the configuration
// and that task folders can be made, and removes what an earlier instance
// of the same name left behind.
func New(ctx context.Context, rt runtime.Runtime, cfg Config, opts ...Option) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{
		rt:         rt,
		cfg:        cfg,
		log:        slog.Default(),
		disk:       taskdir.TmpfsDisk{},
		admission:  newAdmission(cfg.MaxRunning, cfg.MaxQueued),
		runs:       registry.New(cfg.KeepFinished),
		tasks:      filepath.Join(cfg.StateDir, "tasks", cfg.Instance),
		sessions:   session.NewTable(filepath.Join(cfg.StateDir, "sessions", cfg.Instance), func(l *liveSession) *session.Info { return &l.info }),
		keys:       registry.NewKeys(filepath.Join(cfg.StateDir, "keys", cfg.Instance)),
		judgements: newJudged(filepath.Join(cfg.StateDir, "judgements", cfg.Instance)),
		sweepStop:  make(chan struct{}),
	}
	s.catalog.Store(&cfg.Catalog)
	for _, o := range opts {
		o(s)
	}
	if s.toolLimits == (tools.Limits{}) {
		// A caller's own tools need no tool server, and have these.
		s.toolLimits = tools.DefaultLimits()
	}
	if s.store != nil && s.signing != nil {
		s.store.SignWith(s.signing)
	}
	if cfg.RequireRunsc {
		s.cfg.DefaultRuntime = runtime.RunscName
		s.cfg.AllowedRuntimes = []string{runtime.RunscName}
	}
	info, err := s.backendInfo(ctx)
	if err != nil {
		return nil, err
	}
	s.fitHost(info)
	if s.cfg.DefaultRuntime == "" && offers(info, runtime.CrunName) && (len(s.cfg.AllowedRuntimes) == 0 || slices.Contains(s.cfg.AllowedRuntimes, runtime.CrunName)) {
		// crun passes what runc passes with less work per container
		// (docs/runtimes.md): the default where the backend has it.
		s.cfg.DefaultRuntime = runtime.CrunName
	}
	if s.cfg.Network.AllowsNetwork() && s.egress == nil {
		return nil, errdefs.ErrInvalidArgument.WithMessage("the operator allows network rules, but no egress gateway is configured")
	}
	if s.cfg.DefaultRuntime != "" {
		// A default the backend lacks would fail every request: refuse to
		// start instead, and say why.
		if _, _, err := s.checkRuntime(ctx, s.cfg.DefaultRuntime); err != nil {
			return nil, fmt.Errorf("the default runtime cannot run here: %w", err)
		}
	}
	if err := s.cfg.UIDs.CheckHost("/etc"); err != nil {
		return nil, fmt.Errorf("%w: %w", err, errdefs.ErrFailedPrecondition)
	}
	// Only root may enter the state folders: they hold every task's code,
	// inputs and outputs.
	for _, dir := range []string{cfg.StateDir, filepath.Dir(s.tasks), s.tasks} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("state dir: %w", err)
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			return nil, fmt.Errorf("state dir: %w", err)
		}
	}
	if err := taskdir.Probe(s.disk, s.tasks); err != nil {
		return nil, fmt.Errorf("%w: %w", err, errdefs.ErrFailedPrecondition)
	}
	if err := s.reap(ctx); err != nil {
		return nil, err
	}
	s.uids = hostuid.NewAllocator(s.cfg.UIDs)
	exCfg := exec.Config{
		Instance: s.cfg.Instance, Version: s.cfg.Version, Tasks: s.tasks, Bounds: s.cfg.Bounds, Output: s.cfg.Output,
		KillOutputBytes: s.cfg.KillOutputBytes, NoFile: s.cfg.NoFile,
		Runtime: rt, Disk: s.disk, UIDs: s.uids, Egress: s.egress, Store: s.store, Lock: s.lockFile, Log: s.log,
		Tools: s.tools, ToolLimits: s.toolLimits, ToolAudit: s.auditToolCall,
	}
	if s.registerer != nil {
		if s.metrics, err = newMetrics(s, s.registerer); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
		if exCfg.ToolStats, err = tools.NewMetrics(s.registerer); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	s.ex = exec.New(exCfg)
	s.judgements.sweep(time.Now())
	kept, lostRuns, err := s.keys.Recover(time.Now(), cfg.Node)
	if err != nil {
		return nil, fmt.Errorf("idempotency keys of an earlier instance: %w", err)
	}
	for _, rn := range kept {
		s.runs.Restore(rn)
	}
	if s.auditLog != nil {
		for _, rn := range lostRuns {
			s.audit(audit.Event{Kind: audit.KindRunEnd, Tenant: rn.Tenant, RunID: rn.ID, Status: string(run.StatusLost), Reason: rn.Result.Message})
		}
	}
	lost, err := s.sessions.Recover()
	if err != nil {
		return nil, fmt.Errorf("sessions of an earlier instance: %w", err)
	}
	for _, info := range lost {
		s.recordSessionEnd(info)
	}
	// Last, when nothing else can fail: Shutdown undoes it.
	if err := s.disk.MountRoot(s.tasks); err != nil {
		return nil, err
	}
	go s.sweepSessions(s.sweepStop)
	if cfg.PoolSize > 0 {
		if _, ok := rt.(runtime.Preparer); ok {
			s.pool = pool.New(pool.Config{Keys: s.poolKeys, Busy: s.admission.full, Prepare: s.prepareWarm, Log: s.log})
			s.admission.onRelease = s.pool.Nudge
		} else {
			s.log.Warn("the backend cannot prepare containers: the pool is off")
		}
	}
	return s, nil
}

// fitHost lowers the maximum limits to what the backend's host has: a
// maximum it cannot honour would be advertised, then fail the runs that
// ask for it (Docker refuses a container more CPUs than its host has).
func (s *Service) fitHost(info runtime.Info) {
	l := &s.cfg.Limits
	if host := int64(info.CPUs) * 1000; host > 0 && l.Max.CPUMillis > host {
		s.log.Info("the maximum CPU is lowered to what the host has", "max_cpu_millis", l.Max.CPUMillis, "host_cpu_millis", host)
		l.Max.CPUMillis = host
		l.Default.CPUMillis = min(l.Default.CPUMillis, host)
	}
	if host := info.MemoryBytes; host > 0 && l.Max.MemoryBytes > host {
		s.log.Info("the maximum memory is lowered to what the host has", "max_memory_bytes", l.Max.MemoryBytes, "host_memory_bytes", host)
		l.Max.MemoryBytes = host
		l.Default.MemoryBytes = min(l.Default.MemoryBytes, host)
	}
}

// Activity reports how many runs have started since the service did, and
// how many of them are not finished and cleaned up yet.
func (s *Service) Activity() (started uint64, active int64) {
	return s.started.Load(), s.active.Load()
}

// PoolReady waits until the pool has every container it keeps ready, or
// ctx is done. Without a pool it returns at once.
func (s *Service) PoolReady(ctx context.Context) error {
	if s.pool == nil {
		return nil
	}
	for {
		ready, err := s.pool.IsReady(ctx)
		if err != nil || ready {
			return err
		}
		s.pool.Nudge()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// reap removes the containers and task folders of an earlier instance.
func (s *Service) reap(ctx context.Context) error {
	n, err := s.rt.Reap(ctx, map[string]string{LabelInstance: s.cfg.Instance})
	if err != nil {
		return fmt.Errorf("remove containers left by an earlier instance: %w", err)
	}
	entries, err := os.ReadDir(s.tasks)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := taskdir.RemoveDir(s.disk, filepath.Join(s.tasks, e.Name())); err != nil {
			return fmt.Errorf("remove a task folder left by an earlier instance: %w", err)
		}
	}
	// A paused session does not outlive its daemon yet: the checkpoints
	// of the sessions it lost go.
	checkpoints := filepath.Join(s.cfg.StateDir, "checkpoints", s.cfg.Instance)
	saved, _ := os.ReadDir(checkpoints)
	if err := os.RemoveAll(checkpoints); err != nil {
		return fmt.Errorf("remove the checkpoints of an earlier instance: %w", err)
	}
	if n > 0 || len(entries) > 0 || len(saved) > 0 {
		s.log.Info("removed what an earlier instance left behind", "containers", n, "folders", len(entries), "checkpoints", len(saved))
	}
	return nil
}

// OpenBundle opens a stored bundle for reading, if it is the caller's.
func (s *Service) OpenBundle(ctx context.Context, digest string) (io.ReadCloser, error) {
	if err := s.mayOpen(ctx, digest); err != nil {
		return nil, err
	}
	return s.store.Open(digest)
}

// OpenAttestation opens the signature of the bundle with digest d: its
// in-toto statement in a DSSE envelope.
func (s *Service) OpenAttestation(ctx context.Context, digest string) (io.ReadCloser, error) {
	if err := s.mayOpen(ctx, digest); err != nil {
		return nil, err
	}
	b, err := s.store.Attestation(digest)
	if err != nil {
		return nil, err
	}
	if b == nil {
		return nil, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("bundle %s was stored unsigned: it has no attestation", digest))
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// mayOpen refuses a bundle of another tenant's, as if it were not stored.
func (s *Service) mayOpen(ctx context.Context, digest string) error {
	return s.mayOpenAs(access.CallerFrom(ctx), digest)
}

// mayOpenAs is mayOpen for the caller c.
func (s *Service) mayOpenAs(c access.Caller, digest string) error {
	if s.store == nil {
		return errdefs.ErrNotFound.WithMessage("this daemon stores no bundles")
	}
	if !c.Operator {
		owner, err := s.store.Owner(digest)
		if err != nil {
			return err
		}
		if !c.Owns(owner) {
			// The same answer as for a bundle not stored: another
			// tenant's digests are not to be probed.
			return errdefs.ErrNotFound.WithMessage(fmt.Sprintf("bundle %s is not in the store (it may have been evicted)", digest))
		}
	}
	return nil
}

// Config returns the configuration the service runs with.
func (s *Service) Config() Config { return s.cfg }

// Get reports a running or recently finished run of the caller's, with
// an allow-listed run's network log so far while it runs.
func (s *Service) Get(ctx context.Context, id string) (run.Info, error) {
	r, out, err := s.watch(ctx, id)
	if err == nil && r.State != run.Finished {
		r.Network, _ = out.NetworkSince(0)
	}
	return r, err
}

// Cancel kills a running run of the caller's; it returns the run's state
// before the call.
func (s *Service) Cancel(ctx context.Context, id string) (_ run.State, err error) {
	defer func() { s.auditDecision(ctx, audit.Event{RunID: id, Reason: "cancel"}, err) }()
	if _, err := s.Get(ctx, id); err != nil {
		return 0, err
	}
	st, ok := s.runs.Cancel(id, errors.New("cancelled through CancelRun"))
	if !ok {
		return 0, s.unknownRun(id)
	}
	return st, nil
}

// entry says whether a drain refuses a call that enter counts.
type entry bool

const (
	// ongoing goes on while the daemon drains: a live session's call, a
	// keyed run's bookkeeping.
	ongoing entry = false
	// newWork is a new run or session: refused once the daemon drains.
	newWork entry = true
)

// enter counts a call in flight, which Drain and Shutdown wait for, or
// refuses it once the service shuts down (or drains, for new work). The
// check and the count share one lock: a call is either refused or waited
// for, never missed by a drain that began in between. The caller calls
// done when it is over.
func (s *Service) enter(e entry) (done func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case e == newWork && (s.draining || s.closing):
		// Nothing of it has started: another daemon, or this one's
		// successor, can take it, and the client's retry finds it. A
		// rolling update lost a run refused between the drain's end and
		// the listener's close, which answered ErrShuttingDown with no
		// retry hint.
		return nil, &DrainingError{RetryAfter: drainRetry}
	case s.closing:
		return nil, ErrShuttingDown
	}
	s.inflight.Add(1)
	s.entered++
	return func() {
		s.mu.Lock()
		s.entered--
		s.mu.Unlock()
		s.inflight.Done()
	}, nil
}

// Shutdown refuses new runs, cancels running ones, and waits until they have
// been cleaned up or ctx is done.
func (s *Service) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	if s.pool != nil {
		s.pool.Close()
	}
	s.runs.CancelAll(errors.New("sandboxd is shutting down"))
	s.sweepOnce.Do(func() { close(s.sweepStop) })
	s.endAllSessions("sandboxd shut down")
	done := make(chan struct{})
	go func() {
		s.inflight.Wait()
		close(done)
	}()
	select {
	case <-done:
		if s.store != nil {
			s.store.Flush()
		}
		// Every task's folder is gone: their tmpfs goes too.
		return s.disk.UnmountRoot(s.tasks)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run runs one task, reporting its events to obs as they happen, and
// returns how it ended. The error is non-nil only when sandboxd failed to
// run the task; whatever the program did is in the Result.
//
// A request with an idempotency key runs once for its caller and key: a
// retry follows the first call's run (see Attach).
func (s *Service) Run(ctx context.Context, req run.Request, obs run.Observer) (res run.Result, err error) {
	if req.Options.IdempotencyKey != "" {
		return s.runKeyed(ctx, req, obs)
	}
	return s.runRecorded(ctx, req, obs)
}

// runRecorded runs a task for the audit log and the metrics.
func (s *Service) runRecorded(ctx context.Context, req run.Request, obs run.Observer) (res run.Result, err error) {
	rec := s.record(ctx, req)
	defer func() { rec.end(res, err) }()
	return s.runTask(ctx, req, rec.observer(obs))
}

// runTask runs a task (see Run).
func (s *Service) runTask(ctx context.Context, req run.Request, obs run.Observer) (run.Result, error) {
	if err := tools.ValidateCallerTools(req.Caller.Tools); err != nil {
		return run.Result{}, errdefs.ErrInvalidArgument.WithMessage(err.Error())
	}
	if req.Options.SessionID != "" {
		return s.runInSession(ctx, req, obs)
	}
	p, err := s.resolve(access.CallerFrom(ctx), req)
	if err != nil {
		return run.Result{}, err
	}
	p.Tools = append(p.Tools, tools.CallerToolNames(req.Caller.Tools)...)
	return s.pipeline(ctx, req, p, access.CallerFrom(ctx).Name, obs, fresh{s})
}
