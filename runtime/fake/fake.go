// Package fake is an in-memory runtime.Runtime for tests of the task engine
// and of the protocol edges above it. A container "runs" a Go function that
// the test supplies, which writes the output and picks the exit.
package fake

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/internal/testprog"
	"github.com/sandboxd/sandboxd/runtime"
)

// serveTools is the program's end of a tool channel that t serves, until
// it is closed, as a backend serves it.
func serveTools(t runtime.Tools) io.ReadWriteCloser {
	requests, toServe := io.Pipe()
	fromServe, answers := io.Pipe()
	go func() {
		t.Serve(requests, answers)
		answers.Close()
	}()
	return channel{fromServe, toServe}
}

type channel struct {
	*io.PipeReader
	*io.PipeWriter
}

func (c channel) Close() error { c.PipeReader.Close(); return c.PipeWriter.Close() }

// Program is what a fake container runs. It must return when ctx is done
// (the container was killed), and should then report Code 137.
type Program func(ctx context.Context, spec runtime.Spec) runtime.Exit

// TestProgram runs internal/testprog, whose steps are argv[1:], as a
// container of spec would: with its stdin, output, environment, working
// directory and user. It is how the fake passes the contract suite
// (runtime/runtimetest), which real backends pass with the same program.
func TestProgram(ctx context.Context, spec runtime.Spec) runtime.Exit {
	env := map[string]string{}
	for _, kv := range spec.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	var stdin io.Reader = strings.NewReader("")
	if spec.Stdin != nil {
		stdin = spec.Stdin
	}
	p := testprog.Process{
		Stdin: stdin, Stdout: spec.Stdout, Stderr: spec.Stderr,
		Getenv: func(k string) string { return env[k] },
		Dir:    func() string { return spec.WorkingDir },
		IDs: func() (int, int) {
			uid, gid := spec.IDs()
			return int(uid), int(gid)
		},
		Signal: func(int) {},
	}
	if spec.Tools != nil {
		channel := serveTools(spec.Tools)
		defer channel.Close()
		p.Tools = channel
	}
	if len(spec.Compile) > 0 {
		// As the init runs it: no stdin, its output on stderr.
		build := p
		build.Stdin, build.Stdout = strings.NewReader(""), spec.Stderr
		if code := testprog.Run(ctx, build, spec.Compile[1:]); code != 0 {
			return runtime.Exit{Code: code, CompileFailed: true}
		}
	}
	return runtime.Exit{Code: testprog.Run(ctx, p, spec.Argv[1:])}
}

// Runtime is a fake backend.
type Runtime struct {
	// Images maps references to IDs; a reference not in it is not found.
	Images map[string]string
	// Run decides what every container does.
	Run Program
	// Runtimes are the OCI runtimes the backend has; runc is its default.
	Runtimes []runtime.OCIRuntime
	// PrepareErr, when set, is what Prepare fails with (SetPrepareErr
	// changes it while the fake is in use).
	PrepareErr error
	// Volumes are the volumes images declare, by image ID.
	Volumes map[string][]string
	// CPUs and MemoryBytes are the host's (64 and 256 GiB from New).
	CPUs        int
	MemoryBytes int64

	mu       sync.Mutex
	specs    []runtime.Spec
	live     map[string]*Container
	prepared int
	attempts int
}

var (
	_ runtime.Runtime     = (*Runtime)(nil)
	_ runtime.Preparer    = (*Runtime)(nil)
	_ runtime.SessionHost = (*Container)(nil)
)

// New returns a fake backend with the default images, whose containers run p.
func New(p Program) *Runtime {
	return &Runtime{
		Images:   map[string]string{"sandboxd/python": "sha256:python", "sandboxd/shell": "sha256:shell"},
		Run:      p,
		Runtimes: []runtime.OCIRuntime{{Name: "runc", Version: "fake"}},
		CPUs:     64, MemoryBytes: 256 << 30,
		live: map[string]*Container{},
	}
}

// Info reports r.Runtimes, with runc as the default, on a host of
// r.CPUs and r.MemoryBytes.
func (r *Runtime) Info(context.Context) (runtime.Info, error) {
	return runtime.Info{Backend: "fake", Version: "1", DefaultRuntime: "runc", Runtimes: r.Runtimes, CPUs: r.CPUs, MemoryBytes: r.MemoryBytes}, nil
}

// Image resolves ref in r.Images, by name or by ID. Every image carries the
// label of a sandbox image, as the images the set-up builds do.
func (r *Runtime) Image(_ context.Context, ref string) (runtime.Image, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, id := range r.Images {
		if ref == name || ref == id {
			return runtime.Image{ID: id, Ref: ref, Labels: map[string]string{"io.sandboxd.image": strings.TrimPrefix(name, "sandboxd/")}, Volumes: r.Volumes[id]}, nil
		}
	}
	return runtime.Image{}, errdefs.ErrNotFound.WithMessage("no image " + ref)
}

// Start runs r.Run in a goroutine.
func (r *Runtime) Start(ctx context.Context, spec runtime.Spec) (runtime.Container, error) {
	if err := spec.Validate(false); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.ID, err)
	}
	c, err := r.add(spec, false)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.specs = append(r.specs, spec)
	r.mu.Unlock()
	c.run(spec)
	return c, nil
}

// Prepare makes a container that runs r.Run once launched.
func (r *Runtime) Prepare(ctx context.Context, spec runtime.Spec) (runtime.Prepared, error) {
	r.mu.Lock()
	r.attempts++
	prepareErr := r.PrepareErr
	r.mu.Unlock()
	if prepareErr != nil {
		return nil, prepareErr
	}
	if err := spec.Validate(true); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("prepare %s: %w", spec.ID, err)
	}
	c, err := r.add(spec, true)
	if err != nil {
		return nil, err // not c: a nil *Container is no nil Prepared
	}
	return c, nil
}

// SetPrepareErr makes every Prepare from now on fail with err, or succeed
// again when err is nil.
func (r *Runtime) SetPrepareErr(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.PrepareErr = err
}

// Prepared returns how many containers were prepared.
func (r *Runtime) Prepared() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.prepared
}

// PrepareAttempts returns how many times Prepare was called, failed calls
// included.
func (r *Runtime) PrepareAttempts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts
}

func (r *Runtime) add(spec runtime.Spec, prepared bool) (*Container, error) {
	ctx, kill := context.WithCancel(context.Background())
	c := &Container{rt: r, id: spec.ID, labels: spec.Labels, spec: spec, ctx: ctx, kill: kill, done: make(chan struct{})}
	if prepared {
		c.prepared = &spec
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.live[spec.ID]; dup {
		return nil, errdefs.ErrAlreadyExists.WithMessage(fmt.Sprintf("container %s exists", spec.ID))
	}
	r.live[spec.ID] = c
	if prepared {
		r.prepared++
	}
	return c, nil
}

// Reap removes every live container that carries all of labels.
func (r *Runtime) Reap(_ context.Context, labels map[string]string) (int, error) {
	r.mu.Lock()
	var live []*Container
	for _, c := range r.live {
		if matches(c.labels, labels) {
			live = append(live, c)
		}
	}
	r.mu.Unlock()
	for _, c := range live {
		_ = c.Remove(context.Background())
	}
	return len(live), nil
}

// SetImage points an image name at a new ID, as a rebuild does.
func (r *Runtime) SetImage(name, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Images[name] = id
}

// Kill kills a container as the backend would on its own, say on restart.
func (r *Runtime) Kill(id string) {
	r.mu.Lock()
	c := r.live[id]
	r.mu.Unlock()
	if c != nil {
		c.kill()
	}
}

// Specs returns the specs of every container started so far.
func (r *Runtime) Specs() []runtime.Spec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]runtime.Spec(nil), r.specs...)
}

// Live returns the IDs of containers not yet removed, idle prepared ones
// included.
func (r *Runtime) Live() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, 0, len(r.live))
	for id := range r.live {
		ids = append(ids, id)
	}
	return ids
}

// LiveSpecs returns the specs of the containers not yet removed, as they
// were made (a prepared container's without its task).
func (r *Runtime) LiveSpecs() []runtime.Spec {
	r.mu.Lock()
	defer r.mu.Unlock()
	var specs []runtime.Spec
	for _, c := range r.live {
		specs = append(specs, c.spec)
	}
	return specs
}

// Labelled returns the IDs of the containers not yet removed that carry
// all of labels.
func (r *Runtime) Labelled(labels map[string]string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for id, c := range r.live {
		if matches(c.labels, labels) {
			ids = append(ids, id)
		}
	}
	return ids
}

// Running returns the IDs of containers that run, or ran, a program and
// are not yet removed: Live without the prepared ones waiting for a task.
func (r *Runtime) Running() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for id, c := range r.live {
		if c.prepared == nil || c.launched {
			ids = append(ids, id)
		}
	}
	return ids
}

func matches(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// Container is a fake container.
type Container struct {
	rt       *Runtime
	id       string
	labels   map[string]string
	spec     runtime.Spec // as made
	ctx      context.Context
	kill     context.CancelFunc
	done     chan struct{}
	exit     runtime.Exit
	prepared *runtime.Spec // until launched
	launched bool
}

func (c *Container) run(spec runtime.Spec) {
	go func() {
		started := time.Now()
		c.exit = c.rt.Run(c.ctx, spec)
		c.exit.StartedAt, c.exit.FinishedAt = started, time.Now()
		close(c.done)
	}()
}

// Launch runs r.Run on the prepared spec completed by task, once.
func (c *Container) Launch(_ context.Context, task runtime.Task) error {
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	if c.prepared == nil || c.launched {
		return errdefs.ErrFailedPrecondition.WithMessage("the container is not waiting for a task")
	}
	if c.ctx.Err() != nil {
		return errdefs.ErrFailedPrecondition.WithMessage("the container was killed")
	}
	spec := *c.prepared
	if task.Prestarted && spec.Prestart == nil {
		return errdefs.ErrFailedPrecondition.WithMessage("no interpreter was pre-started")
	}
	if !task.Prestarted {
		// The init ends a pre-started interpreter the task does not use:
		// the specs recorded say a task ran in one only when it did.
		spec.Prestart = nil
	}
	spec.Argv, spec.Compile, spec.Env, spec.WorkingDir, spec.Resources = task.Argv, task.Compile, task.Env, task.WorkingDir, task.Resources
	spec.Stdin, spec.Stdout, spec.Stderr, spec.Tools = task.Stdin, task.Stdout, task.Stderr, task.Tools
	if err := spec.Validate(false); err != nil {
		return err
	}
	c.launched = true
	c.rt.specs = append(c.rt.specs, spec)
	c.run(spec)
	return nil
}

// ID returns the container's ID.
func (c *Container) ID() string { return c.id }

// Wait waits for the program to return.
func (c *Container) Wait(ctx context.Context) (runtime.Exit, error) {
	select {
	case <-c.done:
		return c.exit, nil
	case <-ctx.Done():
		return runtime.Exit{}, ctx.Err()
	}
}

// Kill cancels the program's context.
func (c *Container) Kill(context.Context) error {
	c.kill()
	return nil
}

// Remove kills the program, waits for it, and forgets the container.
func (c *Container) Remove(context.Context) error {
	c.kill()
	c.rt.mu.Lock()
	ran := c.prepared == nil || c.launched
	c.rt.mu.Unlock()
	if ran {
		<-c.done
	}
	c.rt.mu.Lock()
	delete(c.rt.live, c.id)
	c.rt.mu.Unlock()
	return nil
}

// OpenSession makes a prepared container a session's: each call runs r.Run
// with the call's argv, environment, working directory and stdin, under
// the prepared spec's user and the session's resources. A kernel call runs
// it with argv {"kernel", CODE}; a kernel call that ends killed (exit code
// above 128) without being interrupted is a kernel that died.
func (c *Container) OpenSession(_ context.Context, r runtime.Resources) (runtime.Session, error) {
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	if c.prepared == nil || c.launched {
		return nil, errdefs.ErrFailedPrecondition.WithMessage("the container is not waiting for a task")
	}
	if c.ctx.Err() != nil {
		return nil, errdefs.ErrFailedPrecondition.WithMessage("the container was killed")
	}
	c.launched = true
	spec := *c.prepared
	spec.Resources = r
	go func() {
		// The container lives until it is killed, as a session's does.
		<-c.ctx.Done()
		c.exit = runtime.Exit{Code: 137}
		close(c.done)
	}()
	return &session{c: c, spec: spec}, nil
}

// Why a call's program was stopped.
var (
	errInterrupted = errors.New("the call was interrupted")
	errTimedOut    = errors.New("the call timed out")
)

// session is a fake container serving a session's calls.
type session struct {
	mu   sync.Mutex
	c    *Container
	spec runtime.Spec
}

// Call runs one call; it fails once the container was killed.
func (s *session) Call(ctx context.Context, call runtime.Call) (runtime.CallExit, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c.ctx.Err() != nil {
		return runtime.CallExit{}, fmt.Errorf("the session's container %s was killed", s.c.id)
	}
	spec := s.spec
	spec.Argv, spec.Env, spec.WorkingDir = call.Argv, call.Env, call.WorkingDir
	if call.Kernel {
		spec.Argv = []string{"kernel", call.Code}
	}
	spec.Stdin, spec.Stdout, spec.Stderr, spec.Tools = bytes.NewReader(call.Stdin), call.Stdout, call.Stderr, call.Tools
	runCtx, cancel := context.WithCancelCause(s.c.ctx)
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() { cancel(errInterrupted) })
	defer stop()
	if call.Timeout > 0 {
		timer := time.AfterFunc(call.Timeout, func() { cancel(errTimedOut) })
		defer timer.Stop()
	}
	c := s.c
	c.rt.mu.Lock()
	c.rt.specs = append(c.rt.specs, spec)
	c.rt.mu.Unlock()
	started := time.Now()
	exit := c.rt.Run(runCtx, spec)
	finished := time.Now()
	if c.ctx.Err() != nil {
		// Killed during the call: an outcome of the call.
		return runtime.CallExit{Code: 137, ContainerExited: true, StartedAt: started, FinishedAt: finished}, nil
	}
	out := runtime.CallExit{Code: exit.Code, OOMKilled: exit.OOMKilled, StartedAt: started, FinishedAt: finished}
	switch cause := context.Cause(runCtx); {
	case errors.Is(cause, errInterrupted):
		out.Interrupted = true
	case errors.Is(cause, errTimedOut):
		out.TimedOut = true
	case call.Kernel && exit.Code > 128:
		out.KernelDied = true
	}
	return out, nil
}

var (
	_ runtime.ProcessHost = (*session)(nil)
	_ runtime.PortDialer  = (*session)(nil)
)

// DialPort connects to port of the host's loopback, where the fake's
// programs, which run in-process, listen.
func (s *session) DialPort(ctx context.Context, port uint16) (net.Conn, error) {
	if s.c.ctx.Err() != nil {
		return nil, errdefs.ErrUnavailable.WithMessage(fmt.Sprintf("the session's container %s was killed", s.c.id))
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
	if err != nil {
		return nil, errdefs.ErrUnavailable.WithMessage(fmt.Sprintf("connect to port %d: %v", port, err))
	}
	return conn, nil
}

// Spawn runs r.Run of the process's argv in a goroutine, beside the
// calls, until it returns, is signalled or the container is killed. A
// signal ends it as SIGKILL would, with 128+N.
func (s *session) Spawn(ctx context.Context, p runtime.ProcessSpec) (runtime.Process, error) {
	if s.c.ctx.Err() != nil {
		return nil, errdefs.ErrUnavailable.WithMessage(fmt.Sprintf("the session's container %s was killed", s.c.id))
	}
	if len(p.Argv) == 0 || p.Argv[0] == "" {
		return nil, errdefs.ErrInvalidArgument.WithMessage("no program")
	}
	spec := s.spec
	spec.Argv, spec.Env, spec.WorkingDir, spec.Tools = p.Argv, p.Env, p.WorkingDir, nil
	stdin, in := io.Pipe()
	spec.Stdin, spec.Stdout, spec.Stderr = stdin, p.Stdout, p.Stderr
	runCtx, cancel := context.WithCancelCause(s.c.ctx)
	// A signal ends a read of stdin too, as it would a real process's.
	context.AfterFunc(runCtx, func() { stdin.CloseWithError(context.Cause(runCtx)) })
	proc := &process{input: make(chan []byte, 1024), cancel: cancel, done: make(chan struct{}), terminal: p.Terminal != nil}
	s.c.rt.mu.Lock()
	s.c.rt.specs = append(s.c.rt.specs, spec)
	s.c.rt.mu.Unlock()
	go func() {
		// What the program has not read yet waits here, as in an init.
		defer in.Close()
		for b := range proc.input {
			if b == nil {
				return
			}
			if _, err := in.Write(b); err != nil {
				return
			}
		}
	}()
	go func() {
		defer close(proc.done)
		defer cancel(nil)
		exit := s.c.rt.Run(runCtx, spec)
		proc.exit = runtime.ProcessExit{Code: exit.Code, FinishedAt: time.Now()}
		var sig signalled
		switch cause := context.Cause(runCtx); {
		case s.c.ctx.Err() != nil:
			proc.exit.Code, proc.exit.SessionEnded = 137, true
		case errors.As(cause, &sig):
			proc.exit.Code = 128 + int(sig)
		}
		stdin.Close()
	}()
	return proc, nil
}

// signalled is the cause of a fake process's end by a signal.
type signalled int

func (s signalled) Error() string { return fmt.Sprintf("signal %d", int(s)) }

// process is a fake background process. It has no terminal, even when
// asked for one: its program runs in-process, on pipes.
type process struct {
	input    chan []byte // nil: the end of stdin
	cancel   context.CancelCauseFunc
	done     chan struct{}
	exit     runtime.ProcessExit
	terminal bool // it was asked for one: Resize is not an error
}

func (p *process) Resize(runtime.WindowSize) error {
	if !p.terminal {
		return errdefs.ErrFailedPrecondition.WithMessage("the process has no terminal")
	}
	return nil
}

func (p *process) WriteStdin(b []byte) error {
	if len(b) > 0 {
		p.send(bytes.Clone(b))
	}
	return nil
}

func (p *process) CloseStdin() error {
	p.send(nil)
	return nil
}

func (p *process) send(b []byte) {
	select {
	case p.input <- b:
	case <-p.done:
	}
}

func (p *process) Signal(n int) error {
	if n <= 0 || n > 64 {
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("signal %d is not a signal", n))
	}
	p.cancel(signalled(n))
	return nil
}

func (p *process) Done() <-chan struct{} { return p.done }

func (p *process) Exit() runtime.ProcessExit {
	<-p.done
	return p.exit
}
