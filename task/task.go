// Package task is the engine of sandboxd: it takes a request, validates it,
// admits it, resolves its limits and policy, runs it in a fresh container
// through a runtime.Runtime, streams its output under caps, classifies how it
// ended, and removes everything it created, whatever happened.
//
// The protocol edges (gRPC, MCP) convert to and from this package's types;
// nothing here knows about them.
package task

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/runtime"
)

// Labels that mark the containers of a daemon instance.
const (
	LabelInstance = "io.sandboxd.instance"
	LabelRun      = "io.sandboxd.run"
)

// The sandbox user, as created in every image.
const (
	sandboxUID = 1000
	sandboxGID = 1000
)

// Config is what the engine needs from the operator.
type Config struct {
	// Instance names this daemon; its containers carry it as a label, and
	// at start it removes whatever an earlier instance of the same name
	// left behind.
	Instance string
	// StateDir holds the tasks' folders (StateDir/tasks/RUN).
	StateDir string
	// Catalog lists the languages and images.
	Catalog images.Catalog
	// Lock records the image digests as built; ListImages reports drift.
	Lock images.Lock
	// Limits is the policy that turns requested limits into effective ones.
	Limits limits.Policy
	// Bounds caps the size of requests.
	Bounds Bounds
	// Mounts maps names to host folders a request may mount at /mnt/NAME.
	Mounts map[string]string
	// Networks are the network modes a request may ask for.
	Networks netpolicy.Allowed
	// DefaultRuntime is the OCI runtime of requests that name none; empty
	// means the engine's default.
	DefaultRuntime string
	// MaxRunning bounds the runs that execute at once.
	MaxRunning int
	// MaxQueued bounds the runs that wait for a slot; beyond it a request
	// is refused at once.
	MaxQueued int
	// KillOutputBytes stops a run whose stdout or stderr passes it (or the
	// stream's own cap, if larger) with OUTPUT_LIMIT, so that a flood does
	// not run to its timeout.
	KillOutputBytes int64
	// NoFile is the open-files limit of every task.
	NoFile int64
	// KeepFinished is how many finished runs GetRun remembers.
	KeepFinished int
}

// DefaultConfig is the configuration of a daemon started without flags.
func DefaultConfig() Config {
	return Config{
		Instance:        "default",
		StateDir:        "/var/lib/sandboxd",
		Catalog:         images.Default(),
		Limits:          limits.DefaultPolicy(),
		Bounds:          DefaultBounds(),
		Networks:        netpolicy.Allowed{netpolicy.None},
		MaxRunning:      4,
		MaxQueued:       64,
		KillOutputBytes: 16 << 20,
		NoFile:          1024,
		KeepFinished:    1024,
	}
}

var instanceName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,31}$`)

// Validate rejects a configuration that contradicts itself.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf(format, args...))
	}
	switch {
	case !instanceName.MatchString(c.Instance):
		return bad("instance %q: use 1-32 of a-z 0-9 _ . - starting with a letter or digit", c.Instance)
	case !filepath.IsAbs(c.StateDir):
		return bad("state dir %q is not an absolute path", c.StateDir)
	case c.MaxRunning < 1:
		return bad("max running %d: at least one task must be able to run", c.MaxRunning)
	case c.MaxQueued < 0:
		return bad("max queued %d is negative", c.MaxQueued)
	case c.KillOutputBytes < 1:
		return bad("kill output bytes %d must be positive", c.KillOutputBytes)
	case c.NoFile < 16:
		return bad("nofile %d is too low for any interpreter", c.NoFile)
	case c.KeepFinished < 0:
		return bad("keep finished %d is negative", c.KeepFinished)
	case len(c.Networks) == 0:
		return bad("no network mode is allowed")
	case len(c.Catalog.Languages) == 0:
		return bad("the catalog has no language")
	}
	for name, dir := range c.Mounts {
		if !mountName.MatchString(name) {
			return bad("mount name %q: use 1-64 of A-Z a-z 0-9 _ . - starting with a letter or digit", name)
		}
		if !filepath.IsAbs(dir) {
			return bad("mount %s: %q is not an absolute path", name, dir)
		}
	}
	return c.Limits.Validate()
}

var mountName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// Observer receives a run's events as they happen, one call at a time. An
// error from it means the caller is gone: the run is cancelled.
type Observer interface {
	// Started is called once, when the container runs.
	Started(Started) error
	// Output is called with each chunk of output up to the stream's cap.
	// p is valid only during the call.
	Output(s Stream, p []byte) error
}

// Service runs tasks.
type Service struct {
	rt    runtime.Runtime
	cfg   Config
	log   *slog.Logger
	admit *admission
	runs  *registry
	tasks string // StateDir/tasks

	mu       sync.Mutex
	closing  bool
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

// ErrShuttingDown refuses runs while the daemon stops.
var ErrShuttingDown = errdefs.ErrUnavailable.WithMessage("sandboxd is shutting down")

// New returns a Service that runs tasks on rt. It checks the configuration
// and that task folders can be made, and removes what an earlier instance
// of the same name left behind.
func New(ctx context.Context, rt runtime.Runtime, cfg Config, opts ...Option) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{
		rt:    rt,
		cfg:   cfg,
		log:   slog.Default(),
		admit: newAdmission(cfg.MaxRunning, cfg.MaxQueued),
		runs:  newRegistry(cfg.KeepFinished),
		tasks: filepath.Join(cfg.StateDir, "tasks"),
	}
	for _, o := range opts {
		o(s)
	}
	if err := os.MkdirAll(s.tasks, 0o711); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	if err := probeMount(s.tasks); err != nil {
		return nil, errdefs.ErrFailedPrecondition.WithMessage(err.Error())
	}
	if err := s.reap(ctx); err != nil {
		return nil, err
	}
	return s, nil
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
		if err := removeTaskDir(filepath.Join(s.tasks, e.Name())); err != nil {
			return fmt.Errorf("remove a task folder left by an earlier instance: %w", err)
		}
	}
	if n > 0 || len(entries) > 0 {
		s.log.Info("removed what an earlier instance left behind", "containers", n, "folders", len(entries))
	}
	return nil
}

// Inventory is what this daemon can run.
type Inventory struct {
	Backend        string
	EngineVersion  string
	Languages      []images.Language
	Images         []ImageStatus
	Runtimes       []runtime.OCIRuntime
	DefaultRuntime string
	DefaultLimits  limits.Limits
	MaxLimits      limits.Limits
	Mounts         []string
}

// ImageStatus is a catalog image as the engine has it.
type ImageStatus struct {
	Name string
	// Digest is the image present in the engine, or "" when missing.
	Digest string
	// LockedDigest is the digest recorded when it was built.
	LockedDigest string
}

// Inventory reports the languages, images, runtimes and limits.
func (s *Service) Inventory(ctx context.Context) (Inventory, error) {
	info, err := s.engineInfo(ctx)
	if err != nil {
		return Inventory{}, err
	}
	inv := Inventory{
		Backend: info.Backend, EngineVersion: info.Version,
		Languages: s.cfg.Catalog.Languages, Runtimes: info.Runtimes, DefaultRuntime: info.DefaultRuntime,
		DefaultLimits: s.cfg.Limits.Default, MaxLimits: s.cfg.Limits.Max,
	}
	if s.cfg.DefaultRuntime != "" {
		inv.DefaultRuntime = s.cfg.DefaultRuntime
	}
	for _, name := range s.cfg.Catalog.Images {
		st := ImageStatus{Name: name, LockedDigest: s.cfg.Lock.Digest(name)}
		img, err := s.rt.Image(ctx, name)
		switch {
		case err == nil:
			st.Digest = img.ID
		case !errdefs.IsNotFound(err):
			return Inventory{}, err
		}
		inv.Images = append(inv.Images, st)
	}
	for name := range s.cfg.Mounts {
		inv.Mounts = append(inv.Mounts, name)
	}
	slices.Sort(inv.Mounts)
	return inv, nil
}

// Config returns the configuration the service runs with.
func (s *Service) Config() Config { return s.cfg }

// Get reports a running or recently finished run.
func (s *Service) Get(id string) (Run, error) {
	r, ok := s.runs.get(id)
	if !ok {
		return Run{}, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("run %q is not known (finished runs are kept for a while only)", id))
	}
	return r, nil
}

// Cancel kills a running run; it returns the run's state before the call.
func (s *Service) Cancel(id string) (RunState, error) {
	st, ok := s.runs.cancel(id, errors.New("cancelled through CancelRun"))
	if !ok {
		return 0, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("run %q is not known", id))
	}
	return st, nil
}

// Shutdown refuses new runs, cancels running ones, and waits until they have
// been cleaned up or ctx is done.
func (s *Service) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.runs.cancelAll(errors.New("sandboxd is shutting down"))
	done := make(chan struct{})
	go func() {
		s.inflight.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// plan is a validated request with everything resolved that needs the
// daemon's configuration.
type plan struct {
	argv     []string
	image    string
	language images.Language
	limits   limits.Limits
	runtime  string
	network  netpolicy.Policy
	workdir  string
	mounts   []runtime.Mount
}

// resolve checks a request against the configuration.
func (s *Service) resolve(req Request) (plan, error) {
	if err := req.validate(s.cfg.Bounds); err != nil {
		return plan{}, err
	}
	var p plan
	o := req.Options
	if req.Program != nil {
		lang, ok := s.cfg.Catalog.Language(req.Program.Language)
		if !ok {
			return plan{}, invalid("language", "%q is not one of %q", req.Program.Language, s.cfg.Catalog.LanguageNames())
		}
		p.language = lang
		p.image = lang.Image
		p.argv = lang.Command
	} else {
		p.image = s.cfg.Catalog.CommandImage
		p.argv = req.Command.Argv
		if req.Command.Shell != "" {
			p.argv = []string{"/bin/sh", "-c", req.Command.Shell}
		}
	}
	if o.Image != "" {
		if !s.cfg.Catalog.HasImage(o.Image) {
			return plan{}, invalid("image", "%q is not one of %q", o.Image, s.cfg.Catalog.Images)
		}
		p.image = o.Image
	}
	var err error
	if p.limits, err = s.cfg.Limits.Resolve(o.Limits); err != nil {
		return plan{}, err
	}
	if p.network, err = s.cfg.Networks.Resolve(o.Network); err != nil {
		return plan{}, err
	}
	p.runtime = o.Runtime
	if p.runtime == "" {
		p.runtime = s.cfg.DefaultRuntime
	}
	if p.runtime != "" && !slices.Contains(KnownRuntimes, p.runtime) {
		return plan{}, invalid("runtime", "%q is not one of %q", p.runtime, KnownRuntimes)
	}
	p.workdir, _ = resolveWorkdir(o.Workdir)
	for i, name := range o.Mounts {
		dir, ok := s.cfg.Mounts[name]
		if !ok {
			return plan{}, invalid(fmt.Sprintf("mounts[%d]", i), "%q is not a mount the operator configured", name)
		}
		p.mounts = append(p.mounts, runtime.Mount{Source: dir, Target: mountDir + "/" + name, ReadOnly: true})
	}
	return p, nil
}

// KnownRuntimes are the OCI runtimes a request may name.
var KnownRuntimes = []string{"runc", "runsc"}

// infoTTL is how long the engine's description is reused: it changes only
// when the operator registers a runtime.
const infoTTL = time.Minute

// engineInfo returns the engine's description, cached for infoTTL.
func (s *Service) engineInfo(ctx context.Context) (runtime.Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.info != nil && time.Since(s.infoAt) < infoTTL {
		return *s.info, nil
	}
	info, err := s.rt.Info(ctx)
	if err != nil {
		return runtime.Info{}, err
	}
	s.info, s.infoAt = &info, time.Now()
	return info, nil
}

// checkRuntime refuses an OCI runtime the engine does not have.
func (s *Service) checkRuntime(ctx context.Context, name string) (runtime.Info, runtime.OCIRuntime, error) {
	info, err := s.engineInfo(ctx)
	if err != nil {
		return runtime.Info{}, runtime.OCIRuntime{}, err
	}
	if name == "" {
		name = info.DefaultRuntime
	}
	i := slices.IndexFunc(info.Runtimes, func(r runtime.OCIRuntime) bool { return r.Name == name })
	if i < 0 {
		var have []string
		for _, r := range info.Runtimes {
			have = append(have, r.Name)
		}
		return info, runtime.OCIRuntime{}, errdefs.ErrFailedPrecondition.WithMessage(fmt.Sprintf("runtime: %q is not installed on this host (it has %q)", name, have))
	}
	return info, info.Runtimes[i], nil
}

// Run runs one task, reporting its events to obs as they happen, and
// returns how it ended. The error is non-nil only when sandboxd failed to
// run the task; whatever the program did is in the Result.
func (s *Service) Run(ctx context.Context, req Request, obs Observer) (Result, error) {
	p, err := s.resolve(req)
	if err != nil {
		return Result{}, err
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return Result{}, ErrShuttingDown
	}
	s.inflight.Add(1)
	s.mu.Unlock()
	defer s.inflight.Done()

	queuedAt := time.Now()
	release, err := s.admit.acquire(ctx)
	if err != nil {
		return Result{}, err
	}
	var ran time.Duration
	defer func() { release(ran) }()
	queued := time.Since(queuedAt)

	info, ociRuntime, err := s.checkRuntime(ctx, p.runtime)
	if err != nil {
		return Result{}, err
	}
	img, err := s.rt.Image(ctx, p.image)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return Result{}, errdefs.ErrFailedPrecondition.WithMessage(fmt.Sprintf("image %s is not built on this host (run scripts/build-images.sh)", p.image))
		}
		return Result{}, err
	}

	id, err := newRunID()
	if err != nil {
		return Result{}, err
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	s.runs.add(id, req.Options.Labels, cancel)
	r := &run{
		svc: s, id: id, req: req, plan: p, image: img, info: info, ociRuntime: ociRuntime,
		queued: queued, obs: obs, ctx: runCtx, cancel: cancel, killed: make(chan struct{}),
	}
	res, err := r.execute()
	ran = res.Duration
	if err != nil {
		s.runs.finish(id, nil)
		return Result{}, err
	}
	s.runs.finish(id, &res)
	return res, nil
}

// newRunID returns a random run ID.
func newRunID() (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// run is one task being executed.
type run struct {
	svc        *Service
	id         string
	req        Request
	plan       plan
	image      runtime.Image
	info       runtime.Info
	ociRuntime runtime.OCIRuntime
	queued     time.Duration
	obs        Observer
	ctx        context.Context
	cancel     context.CancelCauseFunc

	killOnce sync.Once
	reason   killReason
	flooded  Stream
	killed   chan struct{} // closed once the kill reason is set
}

// cleanupTimeout bounds removing a run's container and folders, which must
// happen even when the caller is gone.
const cleanupTimeout = 30 * time.Second

func (r *run) execute() (res Result, err error) {
	s := r.svc
	lim := r.plan.limits
	ws, err := createWorkspace(s.tasks, r.id, lim.DiskBytes, sandboxUID, sandboxGID)
	if err != nil {
		return Result{}, err
	}
	defer func() {
		if rmErr := ws.remove(); rmErr != nil {
			s.log.Error("remove task folder", "run", r.id, "err", rmErr)
		}
	}()
	if err := r.prepare(ws); err != nil {
		return Result{}, err
	}

	em := &emitter{obs: r.obs, onFail: func(err error) { r.kill(killedCancelled, err) }}
	stdout := &capWriter{stream: Stdout, emit: em, limit: lim.StdoutBytes, killAt: max(lim.StdoutBytes, s.cfg.KillOutputBytes), onFlood: r.flood}
	stderr := &capWriter{stream: Stderr, emit: em, limit: lim.StderrBytes, killAt: max(lim.StderrBytes, s.cfg.KillOutputBytes), onFlood: r.flood}

	spec := r.spec(ws, stdout, stderr)
	ctr, err := s.rt.Start(r.ctx, spec)
	if err != nil {
		if errdefs.IsFailedPrecondition(err) {
			// The engine refused this container: the task's failure.
			return r.runtimeError(err), nil
		}
		if r.ctx.Err() != nil {
			return r.cancelledBeforeStart(), nil
		}
		return Result{}, err
	}
	startedAt := time.Now()
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), cleanupTimeout)
		defer cancel()
		if rmErr := ctr.Remove(ctx); rmErr != nil {
			s.log.Error("remove container", "run", r.id, "container", ctr.ID(), "err", rmErr)
		}
	}()

	started := Started{
		RunID: r.id, Limits: lim, Image: r.plan.image, ImageDigest: r.image.ID,
		Runtime: r.ociRuntime.Name, RuntimeVersion: r.ociRuntime.Version, Backend: r.info.Backend,
		StartedAt: startedAt.UTC(),
	}
	s.runs.started(r.id, started)
	if err := em.started(started); err != nil {
		r.kill(killedCancelled, err)
	}

	// The watcher turns the caller's cancellation and the timeout into a
	// kill of the whole container.
	exited := make(chan struct{})
	defer close(exited)
	go r.watch(ctr, lim.Timeout, exited)

	waitCtx, cancelWait := context.WithCancel(context.WithoutCancel(r.ctx))
	defer cancelWait()
	exit, err := ctr.Wait(waitCtx)
	if err != nil {
		return Result{}, fmt.Errorf("run %s: %w", r.id, err)
	}
	duration := time.Since(startedAt)
	if !exit.StartedAt.IsZero() && exit.FinishedAt.After(exit.StartedAt) {
		duration = exit.FinishedAt.Sub(exit.StartedAt)
	}

	r.killOnce.Do(func() {}) // no kill reason can be set from here on
	cause := ""
	if r.reason == killedCancelled {
		cause = "cancelled: " + context.Cause(r.ctx).Error()
	}
	floodAt := stdout.killAt
	if r.flooded == Stderr {
		floodAt = stderr.killAt
	}
	status, msg, sig := outcome(exit, r.reason, cause, r.flooded, floodAt, lim)
	res = Result{
		RunID: r.id, Status: status, ExitCode: exit.Code, Signal: sig,
		Duration: duration, Queued: r.queued, PeakMemoryBytes: exit.PeakMemoryBytes,
		Limits: lim, Message: msg,
	}
	res.StdoutTotal, res.StdoutTruncated = stdout.counts()
	res.StderrTotal, res.StderrTruncated = stderr.counts()
	return res, nil
}

// prepare fills the task's folders before its container exists.
func (r *run) prepare(ws *workspace) error {
	if err := ws.writeFiles(wsInput, r.req.Options.Files); err != nil {
		return err
	}
	var code []File
	if r.req.Program != nil {
		code = []File{{Path: r.plan.language.File, Content: []byte(r.req.Program.Code)}}
	}
	if err := ws.writeFiles(wsCode, code); err != nil {
		return err
	}
	return ws.makeWorkdir(r.plan.workdir, sandboxUID, sandboxGID)
}

// spec is the container of this run.
func (r *run) spec(ws *workspace, stdout, stderr *capWriter) runtime.Spec {
	lim := r.plan.limits
	mounts := []runtime.Mount{
		{Source: ws.path(wsWorkspace), Target: workspaceDir},
		{Source: ws.path(wsInput), Target: inputDir, ReadOnly: true},
	}
	if r.req.Program != nil {
		mounts = append(mounts, runtime.Mount{Source: ws.path(wsCode), Target: images.CodeDir, ReadOnly: true})
	}
	mounts = append(mounts, r.plan.mounts...)
	spec := runtime.Spec{
		ID:         r.svc.cfg.Instance + "-" + r.id,
		Image:      r.image.ID,
		Runtime:    r.ociRuntime.Name,
		Argv:       r.plan.argv,
		Env:        r.env(),
		WorkingDir: r.plan.workdir,
		User:       strconv.Itoa(sandboxUID) + ":" + strconv.Itoa(sandboxGID),
		Hostname:   sandboxHostname,
		Labels:     map[string]string{LabelInstance: r.svc.cfg.Instance, LabelRun: r.id},
		Mounts:     mounts,
		Tmpfs:      []runtime.Tmpfs{{Target: "/tmp", SizeBytes: lim.DiskBytes}},
		Resources: runtime.Resources{
			MemoryBytes: lim.MemoryBytes, CPUMillis: lim.CPUMillis, Pids: lim.Pids, NoFile: r.svc.cfg.NoFile,
		},
		Stdout: stdout,
		Stderr: stderr,
	}
	if r.req.Options.Stdin != nil {
		spec.Stdin = bytes.NewReader(r.req.Options.Stdin)
	}
	return spec
}

// env is the program's environment: defaults chosen for reproducible,
// unbuffered runs, then the request's variables, sorted.
func (r *run) env() []string {
	threads := strconv.FormatInt(max(1, r.plan.limits.CPUMillis/1000), 10)
	vars := map[string]string{
		"PATH":                    "/usr/local/bin:/usr/bin:/bin",
		"HOME":                    "/tmp",
		"LANG":                    "C.UTF-8",
		"LC_ALL":                  "C.UTF-8",
		"TZ":                      "UTC",
		"PYTHONHASHSEED":          "0",
		"PYTHONUNBUFFERED":        "1",
		"PYTHONDONTWRITEBYTECODE": "1",
		"MPLBACKEND":              "Agg",
		"OMP_NUM_THREADS":         threads,
		"OPENBLAS_NUM_THREADS":    threads,
	}
	for k, v := range r.req.Options.Env {
		vars[k] = v
	}
	env := make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	return env
}

// kill records why the container is being killed (the first reason wins)
// and kills it.
func (r *run) kill(reason killReason, cause error) {
	r.killOnce.Do(func() {
		r.reason = reason
		if reason == killedCancelled && cause != nil && r.ctx.Err() == nil {
			r.cancel(cause)
		}
		close(r.killed)
	})
}

// flood is called when an output stream passes its kill threshold.
func (r *run) flood(s Stream) {
	r.killOnce.Do(func() {
		r.reason = killedOutput
		r.flooded = s
		close(r.killed)
	})
}

// watch kills the container when the run is cancelled, its time is up, or
// a kill reason was set, until the container has exited.
func (r *run) watch(ctr runtime.Container, timeout time.Duration, exited <-chan struct{}) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-exited:
		return
	case <-r.ctx.Done():
		r.kill(killedCancelled, nil)
	case <-timer.C:
		r.killOnce.Do(func() {
			r.reason = killedTimeout
			close(r.killed)
		})
	case <-r.killed:
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), cleanupTimeout)
	defer cancel()
	if err := ctr.Kill(ctx); err != nil {
		r.svc.log.Error("kill container", "run", r.id, "err", err)
	}
}

// runtimeError is the result of a container the engine would not start.
func (r *run) runtimeError(err error) Result {
	return Result{RunID: r.id, Status: StatusRuntimeError, ExitCode: -1, Queued: r.queued, Limits: r.plan.limits, Message: err.Error()}
}

// cancelledBeforeStart is the result of a run cancelled while its
// container was being started.
func (r *run) cancelledBeforeStart() Result {
	return Result{RunID: r.id, Status: StatusCancelled, ExitCode: -1, Queued: r.queued, Limits: r.plan.limits,
		Message: "cancelled before the program started: " + context.Cause(r.ctx).Error()}
}
