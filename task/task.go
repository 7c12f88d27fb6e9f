// Package task is the engine of sandboxd: it takes a request, validates it,
// admits it, resolves its limits and policy, runs it in a fresh container
// through a runtime.Runtime, streams its output under caps, classifies how it
// ended, and removes everything it created, whatever happened.
//
// The protocol edges (gRPC, MCP) convert to and from this package's types;
// nothing here knows about them.
package task

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/artifacts"
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
	// StateDir holds the tasks' folders (StateDir/tasks/INSTANCE/RUN), so
	// that instances sharing it leave each other's tasks alone.
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
	// means the engine's default (runsc when RequireRunsc is set).
	DefaultRuntime string
	// AllowedRuntimes are the OCI runtimes a request may ask for; empty
	// allows every known runtime the engine has.
	AllowedRuntimes []string
	// RequireRunsc runs every task under gVisor: a request for another
	// runtime is refused, and the daemon does not start without runsc.
	RequireRunsc bool
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
	// Artifacts stores every run's bundle; nil stores none (sandboxd serve
	// always sets it).
	Artifacts *artifacts.Store
	// Output bounds what is collected from /workspace into a bundle.
	Output OutputLimits
	// Version is sandboxd's version, recorded in bundles.
	Version string
	// PoolSize is how many containers per image are kept started ahead of
	// time on the default runtime, each for one task; 0 turns the pool
	// off. It needs a backend that can prepare containers.
	PoolSize int
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
		Output:          DefaultOutputLimits(),
		Version:         "dev",
		PoolSize:        2,
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
	case c.DefaultRuntime != "" && !slices.Contains(KnownRuntimes, c.DefaultRuntime):
		return bad("default runtime %q is not one of %q", c.DefaultRuntime, KnownRuntimes)
	case c.RequireRunsc && c.DefaultRuntime != "" && c.DefaultRuntime != runtime.RunscName:
		return bad("runsc is required, but the default runtime is %q", c.DefaultRuntime)
	case c.DefaultRuntime != "" && len(c.AllowedRuntimes) > 0 && !slices.Contains(c.AllowedRuntimes, c.DefaultRuntime):
		return bad("the default runtime %q is not among the allowed %q", c.DefaultRuntime, c.AllowedRuntimes)
	case c.PoolSize < 0:
		return bad("pool size %d is negative", c.PoolSize)
	case c.Output.Files < 0 || c.Output.Bytes < 0 || c.Output.Entries < 1 || c.Output.Depth < 1:
		return bad("output limits %+v: counts and sizes must not be negative", c.Output)
	}
	for _, r := range c.AllowedRuntimes {
		if !slices.Contains(KnownRuntimes, r) {
			return bad("allowed runtime %q is not one of %q", r, KnownRuntimes)
		}
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

	pool *pool

	// started counts the runs that got a container, and active those not
	// yet cleaned up, for Activity.
	started atomic.Uint64
	active  atomic.Int64

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
		tasks: filepath.Join(cfg.StateDir, "tasks", cfg.Instance),
	}
	for _, o := range opts {
		o(s)
	}
	if cfg.RequireRunsc {
		s.cfg.DefaultRuntime = runtime.RunscName
		s.cfg.AllowedRuntimes = []string{runtime.RunscName}
	}
	if s.cfg.DefaultRuntime != "" {
		// A default the engine lacks would fail every request: refuse to
		// start instead, and say why.
		if _, _, err := s.checkRuntime(ctx, s.cfg.DefaultRuntime); err != nil {
			return nil, fmt.Errorf("the default runtime cannot run here: %w", err)
		}
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
	if cfg.PoolSize > 0 {
		if prep, ok := rt.(runtime.Preparer); ok {
			s.pool = newPool(s, prep, cfg.PoolSize)
			s.admit.onRelease = s.pool.nudge
		} else {
			s.log.Warn("the backend cannot prepare containers: the pool is off")
		}
	}
	return s, nil
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
		ready, err := s.pool.isReady(ctx)
		if err != nil || ready {
			return err
		}
		s.pool.nudge()
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
	Runtimes       []RuntimeStatus
	DefaultRuntime string
	DefaultLimits  limits.Limits
	MaxLimits      limits.Limits
	Mounts         []string
	Pools          []PoolStatus
}

// RuntimeStatus is an OCI runtime the engine has.
type RuntimeStatus struct {
	runtime.OCIRuntime
	// Allowed says whether requests may ask for it.
	Allowed bool
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
		Languages: s.cfg.Catalog.Languages, DefaultRuntime: info.DefaultRuntime,
		DefaultLimits: s.cfg.Limits.Default, MaxLimits: s.cfg.Limits.Max,
	}
	if s.cfg.DefaultRuntime != "" {
		inv.DefaultRuntime = s.cfg.DefaultRuntime
	}
	for _, r := range info.Runtimes {
		if slices.Contains(KnownRuntimes, r.Name) {
			allowed := len(s.cfg.AllowedRuntimes) == 0 || slices.Contains(s.cfg.AllowedRuntimes, r.Name)
			inv.Runtimes = append(inv.Runtimes, RuntimeStatus{OCIRuntime: r, Allowed: allowed})
		}
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
	if s.pool != nil {
		if inv.Pools, err = s.pool.status(ctx); err != nil {
			return Inventory{}, err
		}
	}
	return inv, nil
}

// OpenBundle opens a stored bundle for reading.
func (s *Service) OpenBundle(_ context.Context, digest string) (io.ReadCloser, error) {
	if s.cfg.Artifacts == nil {
		return nil, errdefs.ErrNotFound.WithMessage("this daemon stores no bundles")
	}
	return s.cfg.Artifacts.Open(digest)
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
	if s.pool != nil {
		s.pool.close()
	}
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
	seed     string // empty when the request sets none
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
	switch {
	case strings.HasPrefix(o.Image, "sha256:"):
		if _, err := artifacts.ParseDigest(o.Image); err != nil {
			return plan{}, invalid("image", "%q is not sha256:<64 hex digits>", o.Image)
		}
		p.image = o.Image
	case o.Image != "":
		if !s.cfg.Catalog.HasImage(o.Image) {
			return plan{}, invalid("image", "%q is not one of %q (or the digest of one)", o.Image, s.cfg.Catalog.Images)
		}
		p.image = o.Image
	}
	if o.Seed != nil {
		p.seed = strconv.FormatUint(*o.Seed, 10)
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
	if p.runtime != "" && len(s.cfg.AllowedRuntimes) > 0 && !slices.Contains(s.cfg.AllowedRuntimes, p.runtime) {
		why := fmt.Sprintf("the operator allows only %q", s.cfg.AllowedRuntimes)
		if s.cfg.RequireRunsc {
			why = "this daemon runs every task under gVisor (runsc)"
		}
		return plan{}, errdefs.ErrPermissionDenied.WithMessage(fmt.Sprintf("runtime: %q is not allowed: %s", p.runtime, why))
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

// imageLabel marks the images the set-up builds; its value is the image's
// short name.
const imageLabel = "io.sandboxd.image"

// image resolves a catalog name, or the digest of a sandbox image (what a
// replay asks for), to the image in the engine and its catalog name. A
// digest must name an image the set-up built, not any image the engine has.
func (s *Service) image(ctx context.Context, ref string) (runtime.Image, string, error) {
	img, err := s.rt.Image(ctx, ref)
	if errdefs.IsNotFound(err) {
		return runtime.Image{}, "", &ImageMissingError{Ref: ref}
	}
	if err != nil {
		return runtime.Image{}, "", err
	}
	if !strings.HasPrefix(ref, "sha256:") {
		return img, ref, nil
	}
	short, ok := img.Labels[imageLabel]
	if !ok || !s.cfg.Catalog.HasImage("sandboxd/"+short) {
		return runtime.Image{}, "", invalid("image", "%s is not a sandbox image of this host's catalog", ref)
	}
	return img, "sandboxd/" + short, nil
}

// ImageMissingError refuses a run whose image is not in the engine: not
// built yet, or (for a digest) rebuilt since. It is a failed precondition.
type ImageMissingError struct{ Ref string }

func (e *ImageMissingError) Error() string {
	if strings.HasPrefix(e.Ref, "sha256:") {
		return fmt.Sprintf("image: %s is not present on this host", e.Ref)
	}
	return fmt.Sprintf("image %s is not built on this host (run scripts/build-images.sh)", e.Ref)
}

// FailedPrecondition marks ImageMissingError for errdefs.
func (e *ImageMissingError) FailedPrecondition() {}

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
	img, imageName, err := s.image(ctx, p.image)
	if err != nil {
		return Result{}, err
	}

	// A pooled container if one fits, or a container of its own.
	var w *warm
	coldReason := s.coldReason(p)
	if coldReason == "" {
		w, coldReason = s.pool.claim(poolKey{image: img.ID, runtime: ociRuntime.Name})
	}
	var id string
	if w != nil {
		id = w.id
	} else if id, err = newRunID(); err != nil {
		return Result{}, err
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	s.runs.add(id, req.Options.Labels, cancel)
	r := &run{
		svc: s, id: id, req: req, plan: p, image: img, imageName: imageName, info: info, ociRuntime: ociRuntime,
		queued: queued, obs: obs, ctx: runCtx, cancel: cancel, killed: make(chan struct{}),
		warm: w, coldReason: coldReason,
	}
	s.started.Add(1)
	s.active.Add(1)
	res, err := r.execute()
	// The container has exited (or never ran): the caller gets the result
	// now, and the container and folders go in the background. Shutdown
	// waits for them.
	s.inflight.Add(1)
	go func() {
		defer s.inflight.Done()
		defer s.active.Add(-1)
		r.cleanup()
	}()
	ran = res.Duration
	if err != nil {
		s.runs.finish(id, nil)
		return Result{}, err
	}
	s.runs.finish(id, &res)
	return res, nil
}
