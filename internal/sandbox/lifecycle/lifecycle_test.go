package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/internal/sandbox/launch"
	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/runtime"
)

// fakePort is the backend port faked: its containers run nothing; a test
// plays the backend's part through their fields.
type fakePort struct {
	createDelay time.Duration
	createErr   error
	startErr    error

	mu      sync.Mutex
	created []*portBox
	live    map[string]*portBox
}

func newFakePort() *fakePort { return &fakePort{live: map[string]*portBox{}} }

func (e *fakePort) Create(ctx context.Context, c Config) (Box, error) {
	select {
	case <-time.After(e.createDelay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if e.createErr != nil {
		return nil, e.createErr
	}
	inR, inW := io.Pipe()
	b := &portBox{e: e, name: c.Name, labels: c.Spec.Labels, startErr: e.startErr, input: inW, inputR: inR,
		exited: make(chan error, 1), done: make(chan struct{}), attached: make(chan struct{})}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.created = append(e.created, b)
	e.live[c.Name] = b
	return b, nil
}

func (e *fakePort) Find(_ context.Context, labels map[string]string) ([]Box, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Box
	for _, b := range e.live {
		match := true
		for k, v := range labels {
			match = match && b.labels[k] == v
		}
		if match {
			out = append(out, b)
		}
	}
	return out, nil
}

func (e *fakePort) liveNames() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var names []string
	for n := range e.live {
		names = append(names, n)
	}
	return names
}

type portBox struct {
	e        *fakePort
	name     string
	labels   map[string]string
	startErr error
	input    *io.PipeWriter
	inputR   *io.PipeReader
	exited   chan error
	done     chan struct{} // output done
	attached chan struct{}

	mu             sync.Mutex
	stdout, stderr io.Writer
	status         Status
	updates        []Limits
	closedOutput   bool
	released       int // SIGTERMs sent to the init by Release
	doneOnce       sync.Once
}

func (b *portBox) Start(context.Context) error { return b.startErr }
func (b *portBox) Update(_ context.Context, l Limits) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.updates = append(b.updates, l)
	return nil
}
func (b *portBox) Attach(stdout, stderr io.Writer) {
	b.mu.Lock()
	b.stdout, b.stderr = stdout, stderr
	b.mu.Unlock()
	close(b.attached)
}
func (b *portBox) Input() io.WriteCloser       { return b.input }
func (b *portBox) Exited() <-chan error        { return b.exited }
func (b *portBox) OutputDone() <-chan struct{} { return b.done }
func (b *portBox) CloseOutput() {
	b.mu.Lock()
	b.closedOutput = true
	b.mu.Unlock()
	b.endOutput()
}
func (b *portBox) endOutput() { b.doneOnce.Do(func() { close(b.done) }) }
func (b *portBox) Status(context.Context) (Status, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.status, nil
}
func (b *portBox) setStatus(s Status) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.status = s
}
func (b *portBox) Kill(context.Context) error { return nil }
func (b *portBox) Release(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.released++
	return nil
}
func (b *portBox) Remove(context.Context) error {
	b.e.mu.Lock()
	defer b.e.mu.Unlock()
	delete(b.e.live, b.name)
	b.inputR.Close()
	return nil
}

// readLaunch reads the launch message the lifecycle sent to the box's init.
func (b *portBox) readLaunch(t *testing.T) launch.Spec {
	t.Helper()
	spec, err := launch.Read(b.inputR)
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, b.inputR)
	return spec
}

func newLifecycle(t *testing.T, e Port, opts Options) *Lifecycle {
	t.Helper()
	init := filepath.Join(t.TempDir(), "init")
	if err := os.WriteFile(init, []byte("init"), 0o555); err != nil {
		t.Fatal(err)
	}
	opts.InitPath = init
	l, err := New(e, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func testSpec(id string) runtime.Spec {
	return runtime.Spec{ID: id, Image: "sha256:x", Argv: []string{"true"}, WorkingDir: "/", User: "1000:1000",
		Labels:    map[string]string{"test": "yes"},
		Resources: runtime.Resources{MemoryBytes: 64 << 20, CPUMillis: 500, Pids: 16, NoFile: 64},
		Stdout:    &bytes.Buffer{}, Stderr: &bytes.Buffer{}}
}

func TestNewRefusesAnInitThatIsNotAFile(t *testing.T) {
	for name, path := range map[string]string{"missing": "/nonexistent/init", "a folder": t.TempDir()} {
		if _, err := New(newFakePort(), Options{InitPath: path}); !errdefs.IsFailedPrecondition(err) {
			t.Errorf("%s: New() = %v, want failed precondition", name, err)
		}
	}
}

// TestCreateIsNotCutShortByTheCaller cancels a start while the backend is
// still creating: the create runs to its end, and what it made is removed.
func TestCreateIsNotCutShortByTheCaller(t *testing.T) {
	e := newFakePort()
	e.createDelay = 100 * time.Millisecond
	l := newLifecycle(t, e, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := l.Start(ctx, testSpec("cut"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start() = %v, want the caller's deadline", err)
	}
	if len(e.created) != 1 {
		t.Fatalf("%d containers created, want the create to have run to its end", len(e.created))
	}
	if live := e.liveNames(); len(live) > 0 {
		t.Fatalf("containers left: %v", live)
	}
}

func TestRefusedStartIsAFailedPreconditionAndLeavesNothing(t *testing.T) {
	for name, mutate := range map[string]func(*fakePort){
		"start":   func(e *fakePort) { e.startErr = errors.New("runc: chdir to cwd: no such file") },
		"refusal": func(e *fakePort) { e.createErr = Refusal(errors.New("runc create: bad mount")) },
	} {
		t.Run(name, func(t *testing.T) {
			e := newFakePort()
			mutate(e)
			l := newLifecycle(t, e, Options{})
			_, err := l.Start(context.Background(), testSpec("refused"))
			if !errdefs.IsFailedPrecondition(err) {
				t.Fatalf("Start() = %v, want failed precondition", err)
			}
			if live := e.liveNames(); len(live) > 0 {
				t.Fatalf("containers left: %v", live)
			}
		})
	}
	// An engine that does not answer is not the task's fault.
	e := newFakePort()
	e.startErr = errdefs.ErrUnavailable
	l := newLifecycle(t, e, Options{})
	if _, err := l.Start(context.Background(), testSpec("down")); !errdefs.IsUnavailable(err) {
		t.Fatalf("Start() = %v, want unavailable", err)
	}
}

func TestLaunchUpdatesOnlyChangedLimitsAndOnlyOnce(t *testing.T) {
	e := newFakePort()
	l := newLifecycle(t, e, Options{})
	spec := testSpec("pooled")
	spec.Argv, spec.Stdout, spec.Stderr = nil, nil, nil
	p, err := l.Prepare(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	task := testSpec("pooled").Task()
	task.Resources.MemoryBytes = 128 << 20
	if err := p.Launch(context.Background(), task); err != nil {
		t.Fatal(err)
	}
	b := e.created[0]
	if got := b.readLaunch(t); len(got.Argv) != 1 || got.Argv[0] != "true" || got.Report == "" {
		t.Errorf("launch message %+v, want the task's argv and a report token", got)
	}
	// Memory goes up: memory+swap first, then memory.
	want := []Limits{
		{MemoryBytes: 64 << 20, MemorySwapBytes: 128 << 20, CPUMillis: 500, PidsLimit: 16 + InitThreads},
		{MemoryBytes: 128 << 20, MemorySwapBytes: 128 << 20, CPUMillis: 500, PidsLimit: 16 + InitThreads},
	}
	if !slices.Equal(b.updates, want) {
		t.Errorf("updates %+v, want %+v", b.updates, want)
	}
	if err := p.Launch(context.Background(), task); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("a second Launch() = %v, want failed precondition", err)
	}
	if err := p.Remove(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestLaunchAsksTheInitToHoldWhereTheReportIsTheExit: with a cgroup to
// weigh the report by, the init holds the container after it; without,
// the backend's word on the exit is the only one, and the init must not.
func TestLaunchAsksTheInitToHoldWhereTheReportIsTheExit(t *testing.T) {
	for _, withCgroup := range []bool{true, false} {
		e := newFakePort()
		opts := Options{}
		if withCgroup {
			opts = Options{Cgroups: cgroupWithOOMKills(t, "0"), CgroupRoot: "/sandboxd"}
		}
		c, err := newLifecycle(t, e, opts).Start(context.Background(), testSpec("hold"))
		if err != nil {
			t.Fatal(err)
		}
		if got := e.created[0].readLaunch(t); got.Hold != withCgroup || got.Report == "" {
			t.Errorf("with a cgroup %v: launch message %+v, want a report token and Hold %v", withCgroup, got, withCgroup)
		}
		if err := c.Remove(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRemoveLetsAHoldingInitGoFirst: after a reported exit the init
// holds the container; Remove lets it go (through the control folder where
// it is bound, else by SIGTERM) and waits for its exit before removing,
// so that the backend need not kill it.
func TestRemoveLetsAHoldingInitGoFirst(t *testing.T) {
	for _, withControl := range []bool{true, false} {
		e := newFakePort()
		l := newLifecycle(t, e, Options{Cgroups: cgroupAt(t, "sandboxd/sandboxd-held", "0"), CgroupRoot: "/sandboxd"})
		spec := testSpec("held")
		if withControl {
			spec.ControlDir = t.TempDir()
		}
		c, err := l.Start(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		b := e.created[0]
		line := launch.ReportLine(b.readLaunch(t).Report, 0)
		<-b.attached
		b.stdout.Write(line)
		b.stderr.Write(line)
		waitCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		exit, err := c.Wait(waitCtx)
		cancel()
		if err != nil || exit.Code != 0 {
			t.Fatalf("Wait() = %+v, %v; want the reported exit", exit, err)
		}
		removed := make(chan error, 1)
		go func() { removed <- c.Remove(context.Background()) }()
		let := func() bool {
			b.mu.Lock()
			defer b.mu.Unlock()
			if withControl {
				_, err := os.Stat(filepath.Join(spec.ControlDir, "release"))
				return err == nil && b.released == 0
			}
			return b.released == 1
		}
		testutil.WaitFor(t, "the init let go", let)
		select {
		case err := <-removed:
			t.Fatalf("Remove() = %v before the init exited", err)
		case <-time.After(100 * time.Millisecond):
		}
		b.exited <- nil
		// The fake hierarchy's cgroups are folders with files, which no
		// rmdir removes: only the cgroup's removal may fail.
		if err := <-removed; err != nil && !strings.Contains(err.Error(), "remove cgroup") {
			t.Fatal(err)
		}
		if names := e.liveNames(); len(names) != 0 {
			t.Fatalf("left %v", names)
		}
	}
}

// TestWaitGivesOutputItsGrace has the backend report the exit while the
// output has not ended: Wait closes it after the grace and still returns.
func TestWaitGivesOutputItsGrace(t *testing.T) {
	e := newFakePort()
	l := newLifecycle(t, e, Options{})
	c, err := l.Start(context.Background(), testSpec("late"))
	if err != nil {
		t.Fatal(err)
	}
	b := e.created[0]
	b.readLaunch(t)
	b.setStatus(Status{Code: 3})
	b.exited <- nil
	start := time.Now()
	exit, err := c.Wait(context.Background())
	if err != nil || exit.Code != 3 {
		t.Fatalf("Wait() = %+v, %v; want code 3", exit, err)
	}
	if took := time.Since(start); took < outputGrace || !b.closedOutput {
		t.Fatalf("Wait returned after %v (output closed %v), want after the %v grace with the output closed", took, b.closedOutput, outputGrace)
	}
}

// TestWaitGivesALateOOMReportItsGrace has the backend report an exit by
// SIGKILL first and the OOM kill a little later.
func TestWaitGivesALateOOMReportItsGrace(t *testing.T) {
	for _, tt := range []struct {
		name    string
		grace   time.Duration
		wantOOM bool
	}{{"with grace", 200 * time.Millisecond, true}, {"without", 0, false}} {
		t.Run(tt.name, func(t *testing.T) {
			e := newFakePort()
			l := newLifecycle(t, e, Options{OOMGrace: tt.grace})
			c, err := l.Start(context.Background(), testSpec("oom"))
			if err != nil {
				t.Fatal(err)
			}
			b := e.created[0]
			b.readLaunch(t)
			b.setStatus(Status{Code: 137})
			b.endOutput()
			b.exited <- nil
			time.AfterFunc(50*time.Millisecond, func() { b.setStatus(Status{Code: 137, OOMKilled: true}) })
			exit, err := c.Wait(context.Background())
			if err != nil || exit.OOMKilled != tt.wantOOM {
				t.Fatalf("Wait() = %+v, %v; want OOM killed %v", exit, err, tt.wantOOM)
			}
		})
	}
}

func TestWaitTakesTheEnginesError(t *testing.T) {
	e := newFakePort()
	l := newLifecycle(t, e, Options{})
	c, err := l.Start(context.Background(), testSpec("gone"))
	if err != nil {
		t.Fatal(err)
	}
	e.created[0].readLaunch(t)
	e.created[0].exited <- errdefs.ErrUnavailable
	if _, err := c.Wait(context.Background()); !errdefs.IsUnavailable(err) {
		t.Fatalf("Wait() = %v, want the engine's error", err)
	}
}

func TestReapRemovesOnlyTheLabelled(t *testing.T) {
	e := newFakePort()
	l := newLifecycle(t, e, Options{})
	mine, other := testSpec("mine"), testSpec("other")
	other.Labels = map[string]string{"test": "no"}
	for _, s := range []runtime.Spec{mine, other} {
		if _, err := l.Start(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	n, err := l.Reap(context.Background(), map[string]string{"test": "yes"})
	if err != nil || n != 1 {
		t.Fatalf("Reap() = %d, %v; want 1", n, err)
	}
	if live := e.liveNames(); len(live) != 1 || live[0] != "sandboxd-other" {
		t.Fatalf("live after reap: %v, want only sandboxd-other", live)
	}
}

// TestFailedPrepareIsANilContainer fails every way a prepare can: the
// caller gets a nil runtime.Prepared, which its cleanup can test against
// nil (a nil *container inside the interface panicked CreateSession's
// cleanup, issue 29), and nothing is left.
func TestFailedPrepareIsANilContainer(t *testing.T) {
	for name, mutate := range map[string]func(*fakePort){
		"create fails":    func(e *fakePort) { e.createErr = errors.New("engine: no space left") },
		"create refused":  func(e *fakePort) { e.createErr = Refusal(errors.New("runc create: exit status 1")) },
		"start fails":     func(e *fakePort) { e.startErr = errors.New("can't get final child's PID from pipe: EOF") },
		"engine is down":  func(e *fakePort) { e.startErr = errdefs.ErrUnavailable },
		"create too slow": func(e *fakePort) { e.createDelay = 100 * time.Millisecond },
	} {
		t.Run(name, func(t *testing.T) {
			e := newFakePort()
			mutate(e)
			l := newLifecycle(t, e, Options{})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			if e.createDelay == 0 {
				ctx = context.Background()
			}
			c, err := l.Prepare(ctx, testSpec("broken"))
			if err == nil {
				t.Fatal("Prepare() succeeded, want an error")
			}
			if c != nil {
				t.Fatalf("Prepare() = %#v with %v, want a nil Prepared", c, err)
			}
			if live := e.liveNames(); len(live) > 0 {
				t.Fatalf("containers left: %v", live)
			}
		})
	}
}

// TestUseCgroupsSaysWhyPeakMemoryIsZero: a backend without parent cgroups
// of its own reports a peak of 0; the log says so once, with the reason,
// and a usable hierarchy is taken without a word.
func TestUseCgroupsSaysWhyPeakMemoryIsZero(t *testing.T) {
	unified := t.TempDir()
	if err := os.WriteFile(filepath.Join(unified, "cgroup.controllers"), []byte("memory pids\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, root string
		unusable   error
		want       string // in the log; "" for no warning and cgroups in use
	}{
		{"a v2 hierarchy", unified, nil, ""},
		{"the backend's own reason", unified, errors.New("dockerd's cgroup driver is \"systemd\""), `why="dockerd's cgroup driver is \"systemd\""`},
		{"no cgroup file system there", t.TempDir(), nil, "no cgroup v1 memory controller or cgroup v2 hierarchy"},
		{"none given", "", nil, "no cgroup file system given"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			o := Options{Log: slog.New(slog.NewTextHandler(&log, nil))}
			o.UseCgroups(tc.root, "/sandboxd/test", tc.unusable)
			if tc.want == "" {
				if o.Cgroups == nil || !o.Cgroups.Unified() || o.CgroupRoot != "/sandboxd/test" || log.Len() != 0 {
					t.Errorf("cgroups %v below %q, log %q: want the unified hierarchy below /sandboxd/test, no log", o.Cgroups, o.CgroupRoot, log.String())
				}
				return
			}
			if o.Cgroups != nil || !strings.Contains(log.String(), "peak memory is not reported") || !strings.Contains(log.String(), tc.want) {
				t.Errorf("cgroups %v, log %q: want none, and a warning naming %q", o.Cgroups, log.String(), tc.want)
			}
		})
	}
}

// TestProcessesEndingWithTheirSessionAreKilled: once the session's
// container is being removed, a process the init reports ended (it killed
// it, or the runtime did first) ended with the session, as one the end
// found running does; before, an exit is the process's own.
func TestProcessesEndingWithTheirSessionAreKilled(t *testing.T) {
	var ps processes
	own, reported, found := ps.add(nil, runtime.ProcessSpec{}), ps.add(nil, runtime.ProcessSpec{}), ps.add(nil, runtime.ProcessSpec{})
	ps.ProcessState(own.n, launch.ProcessState{Exited: true, Code: 7})
	ps.endingNow()
	ps.ProcessState(reported.n, launch.ProcessState{Exited: true, Code: 137})
	ps.endAll()
	late := ps.add(nil, runtime.ProcessSpec{})
	for _, tt := range []struct {
		name  string
		p     *process
		code  int
		ended bool
	}{{"exited on its own", own, 7, false}, {"reported during the end", reported, 137, true}, {"found running at the end", found, 137, true}, {"started after", late, 137, true}} {
		<-tt.p.done
		if tt.p.exit.Code != tt.code || tt.p.exit.SessionEnded != tt.ended {
			t.Errorf("%s: %+v, want code %d, session ended %v", tt.name, tt.p.exit, tt.code, tt.ended)
		}
	}
}

// TestCheckpointNeedsAPortThatCan: a backend whose port cannot checkpoint
// refuses a session's checkpoint and a restore as failed preconditions
// that name who can, and creates nothing for the restore.
func TestCheckpointNeedsAPortThatCan(t *testing.T) {
	e := newFakePort()
	l := newLifecycle(t, e, Options{})
	spec := testSpec("session")
	spec.Argv, spec.Stdout, spec.Stderr = nil, nil, nil
	p, err := l.Prepare(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Remove(context.Background())
	sess, err := p.(runtime.SessionHost).OpenSession(context.Background(), spec.Resources)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess.(runtime.Checkpointer).Checkpoint(context.Background(), t.TempDir(), false); !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "direct backend") {
		t.Errorf("Checkpoint() = %v, want a failed precondition naming the backend that can", err)
	}
	if _, err := l.Restore(context.Background(), testSpec("restored"), t.TempDir(), nil); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("Restore() = %v, want a failed precondition", err)
	}
	if len(e.created) != 1 {
		t.Errorf("%d containers were created, want the session's alone", len(e.created))
	}
}
