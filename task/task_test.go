package task

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task/hostuid"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/taskdir"
)

// testDisk makes tasks' folders tmpfs mounts when the tests run as root
// (as in CI), and plain folders otherwise.
func testDisk() Option {
	if os.Geteuid() == 0 {
		return WithDisk(taskdir.TmpfsDisk{})
	}
	return WithDisk(taskdir.FolderDisk{})
}

// newService returns a Service on rt with its state in a temp folder.
func newService(t *testing.T, rt runtime.Runtime, mutate func(*Config), opts ...Option) *Service {
	t.Helper()
	cfg := DefaultConfig()
	cfg.StateDir = t.TempDir()
	// The pool is off unless a test turns it on (pool_test.go), and
	// pre-started interpreters too (prestart_test.go).
	cfg.PoolSize, cfg.Prestart = 0, false
	dataDir := t.TempDir()
	cfg.Mounts = map[string]string{"data": dataDir}
	// The fake's images, as a lock would name them.
	cfg.AllowedImages = []string{"sha256:python", "sha256:shell"}
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := New(context.Background(), rt, cfg, append([]Option{testDisk()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		assertNoTaskFolders(t, s)
		if f, ok := rt.(*fake.Runtime); ok && len(f.Live()) > 0 {
			t.Errorf("containers left after shutdown: %v", f.Live())
		}
	})
	return s
}

func assertNoTaskFolders(t *testing.T, s *Service) {
	t.Helper()
	entries, err := os.ReadDir(s.tasks)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) > 0 {
		t.Errorf("task folders left behind: %v", entries)
	}
}

// assertNoContainers checks that no container of a run is left once its
// cleanup, which follows the result, is done: the pool's idle ones may be
// there until the service shuts down.
func assertNoContainers(t *testing.T, rt *fake.Runtime) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(rt.Running()) > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if running := rt.Running(); len(running) > 0 {
		t.Errorf("containers left behind: %v", running)
	}
}

// waitNoTaskFolders waits for the runs' cleanup to remove their folders.
func waitNoTaskFolders(t *testing.T, s *Service) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if entries, _ := os.ReadDir(s.tasks); len(entries) == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	assertNoTaskFolders(t, s)
}

// untilKilled writes nothing and waits to be killed.
func untilKilled(ctx context.Context, _ runtime.Spec) runtime.Exit {
	<-ctx.Done()
	return runtime.Exit{Code: 137}
}

func TestRunStreamsOutputAndClassifies(t *testing.T) {
	rt := fake.New(func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		io.WriteString(spec.Stdout, "hello ")
		io.WriteString(spec.Stderr, "warning\n")
		io.WriteString(spec.Stdout, "world\n")
		return runtime.Exit{Code: 3, PeakMemoryBytes: 4096}
	})
	s := newService(t, rt, nil)
	rec := newRecorder()
	res, err := s.Run(context.Background(), run.Request{Program: code("print(1)")}, rec)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != run.StatusNonzeroExit || res.ExitCode != 3 {
		t.Errorf("result = %s exit %d, want NONZERO_EXIT exit 3", res.Status, res.ExitCode)
	}
	if got := rec.text(run.Stdout); got != "hello world\n" {
		t.Errorf("stdout = %q", got)
	}
	if got := rec.text(run.Stderr); got != "warning\n" {
		t.Errorf("stderr = %q", got)
	}
	if res.StdoutTotal != 12 || res.StderrTotal != 8 || res.StdoutTruncated || res.StderrTruncated {
		t.Errorf("totals = %d/%d truncated %v/%v", res.StdoutTotal, res.StderrTotal, res.StdoutTruncated, res.StderrTruncated)
	}
	if res.PeakMemoryBytes != 4096 {
		t.Errorf("peak memory = %d, want the runtime's 4096", res.PeakMemoryBytes)
	}
	if len(rec.started) != 1 || rec.started[0].RunID != res.RunID || rec.started[0].Limits != limits.Defaults() {
		t.Errorf("started = %+v, want one event with the run's ID and the effective limits", rec.started)
	}
	if rec.started[0].ImageDigest != "sha256:python" || rec.started[0].Runtime != "runc" {
		t.Errorf("started = %+v, want the image digest and the runtime", rec.started[0])
	}
	got, err := s.Get(context.Background(), res.RunID)
	if err != nil || got.State != run.Finished || got.Result.Status != run.StatusNonzeroExit {
		t.Errorf("Get() = %+v, %v; want the finished run", got, err)
	}
	assertNoContainers(t, rt)
	waitNoTaskFolders(t, s)
}

func TestRunSpec(t *testing.T) {
	var inputs atomic.Value
	rt := fake.New(func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		// What the container would see, read from the host side while it runs.
		seen := map[string]string{}
		for _, m := range spec.Mounts {
			filepath.WalkDir(m.Source, func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					b, _ := os.ReadFile(p)
					info, _ := d.Info()
					rel, _ := filepath.Rel(m.Source, p)
					seen[filepath.Join(m.Target, rel)] = fmt.Sprintf("%s %v", b, info.Mode().Perm())
				}
				return nil
			})
		}
		var st unix.Statfs_t
		for _, m := range spec.Mounts {
			if m.Target == "/workspace" {
				unix.Statfs(m.Source, &st)
				seen["workspace-size"] = fmt.Sprint(int64(st.Blocks) * st.Bsize)
				info, _ := os.Stat(filepath.Join(m.Source, "sub", "dir"))
				seen["workdir-made"] = fmt.Sprint(info != nil && info.IsDir())
			}
		}
		inputs.Store(seen)
		return runtime.Exit{}
	})
	s := newService(t, rt, nil)
	req := run.Request{
		Program: &run.Program{Language: "python", Code: "print(42)"},
		Options: run.Options{
			Files:   []run.File{{Path: "data.csv", Content: []byte("a,b")}, {Path: "bin/tool", Content: []byte("#!"), Executable: true}},
			Mounts:  []string{"data"},
			Env:     map[string]string{"FOO": "bar", "TZ": "Europe/Paris"},
			Workdir: "sub/dir",
			Limits:  limits.Limits{MemoryBytes: 64 << 20, CPUMillis: 500, Pids: 32, DiskBytes: 8 << 20},
		},
	}
	res, err := s.Run(operatorCtx(), req, newRecorder())
	if err != nil || res.Status != run.StatusOK {
		t.Fatalf("Run() = %+v, %v", res, err)
	}
	specs := rt.Specs()
	if len(specs) != 1 {
		t.Fatalf("%d containers started, want 1", len(specs))
	}
	spec := specs[0]
	if uid, gid := spec.IDs(); !hostuid.DefaultRange().Contains(uid) || uid != gid || spec.WorkingDir != "/workspace/sub/dir" || spec.Hostname != "sandbox" {
		t.Errorf("user %q workdir %q hostname %q", spec.User, spec.WorkingDir, spec.Hostname)
	}
	if !slices.Equal(spec.Argv, []string{"python3", "/code/main.py"}) {
		t.Errorf("argv = %q", spec.Argv)
	}
	want := runtime.Resources{MemoryBytes: 64 << 20, CPUMillis: 500, Pids: 32, NoFile: 1024}
	if spec.Resources != want {
		t.Errorf("resources = %+v, want %+v", spec.Resources, want)
	}
	if len(spec.Tmpfs) != 1 || spec.Tmpfs[0] != (runtime.Tmpfs{Target: "/tmp", SizeBytes: 8 << 20}) {
		t.Errorf("tmpfs = %+v", spec.Tmpfs)
	}
	if spec.Labels[LabelInstance] != "default" || spec.Labels[LabelRun] != res.RunID {
		t.Errorf("labels = %v", spec.Labels)
	}
	for _, kv := range []string{"FOO=bar", "TZ=Europe/Paris", "PYTHONHASHSEED=0", "OMP_NUM_THREADS=1", "HOME=/tmp"} {
		if !slices.Contains(spec.Env, kv) {
			t.Errorf("env %q lacks %s", spec.Env, kv)
		}
	}
	if !slices.IsSorted(spec.Env) {
		t.Errorf("env is not sorted: %q", spec.Env)
	}
	targets := map[string]bool{}
	for _, m := range spec.Mounts {
		targets[m.Target] = m.ReadOnly
	}
	wantMounts := map[string]bool{"/workspace": false, "/input": true, "/code": true, "/mnt/data": true}
	if fmt.Sprint(targets) != fmt.Sprint(wantMounts) {
		t.Errorf("mounts (target: read-only) = %v, want %v", targets, wantMounts)
	}
	seen := inputs.Load().(map[string]string)
	wantSeen := map[string]string{
		"/input/data.csv": "a,b -r--r--r--",
		"/input/bin/tool": "#! -r-xr-xr-x",
		"/code/main.py":   "print(42) -r--r--r--",
		"workdir-made":    "true",
	}
	if os.Geteuid() == 0 {
		// The workspace is a tmpfs of the task's disk size (not as a plain
		// folder, without root; the engine suite's DiskLimit proves it on
		// real containers).
		wantSeen["workspace-size"] = fmt.Sprint(8 << 20)
	}
	for path, want := range wantSeen {
		if seen[path] != want {
			t.Errorf("%s = %q, want %q", path, seen[path], want)
		}
	}
}

func TestRunTimeoutKillsTheContainer(t *testing.T) {
	rt := fake.New(untilKilled)
	s := newService(t, rt, nil)
	start := time.Now()
	res, err := s.Run(context.Background(), run.Request{Program: code("while True: pass"),
		Options: run.Options{Limits: limits.Limits{Timeout: 200 * time.Millisecond}}}, newRecorder())
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != run.StatusTimeout || res.Signal != 9 {
		t.Errorf("result = %+v, want TIMEOUT by signal 9", res)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a 200ms timeout took %v", took)
	}
	assertNoContainers(t, rt)
}

func TestRunOutputFloodStopsTheProgram(t *testing.T) {
	rt := fake.New(func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		chunk := make([]byte, 32<<10)
		for i := range chunk {
			chunk[i] = 'x'
		}
		for ctx.Err() == nil {
			spec.Stdout.Write(chunk)
		}
		return runtime.Exit{Code: 137}
	})
	s := newService(t, rt, func(c *Config) { c.KillOutputBytes = 1 << 20 })
	rec := newRecorder()
	res, err := s.Run(context.Background(), run.Request{Program: code("print('x'*10**9)"),
		Options: run.Options{Limits: limits.Limits{StdoutBytes: 1500}}}, rec)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != run.StatusOutputLimit || !res.StdoutTruncated || res.StdoutTotal <= 1<<20 {
		t.Errorf("result = %+v, want OUTPUT_LIMIT, truncated, total past 1 MiB", res)
	}
	if got := len(rec.text(run.Stdout)); got != 1500 {
		t.Errorf("delivered %d bytes, want exactly the cap of 1500", got)
	}
}

func TestRunCancelledByCaller(t *testing.T) {
	rt := fake.New(untilKilled)
	s := newService(t, rt, nil)
	ctx, cancel := context.WithCancel(context.Background())
	rec := &cancelOnStart{recorder: newRecorder(), cancel: cancel}
	res, err := s.Run(ctx, run.Request{Program: code("import time; time.sleep(60)")}, rec)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != run.StatusCancelled {
		t.Errorf("status = %s, want CANCELLED", res.Status)
	}
	assertNoContainers(t, rt)
}

// cancelOnStart cancels the caller's context once the run has started.
type cancelOnStart struct {
	*recorder
	cancel context.CancelFunc
}

func (c *cancelOnStart) Started(s run.Started) error {
	c.recorder.Started(s)
	c.cancel()
	return nil
}

func TestCancelRun(t *testing.T) {
	rt := fake.New(untilKilled)
	s := newService(t, rt, nil)
	started := make(chan string, 1)
	done := make(chan run.Result, 1)
	go func() {
		res, err := s.Run(context.Background(), run.Request{Program: code("x")}, &notifyStart{recorder: newRecorder(), ids: started})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	id := <-started
	if r, err := s.Get(context.Background(), id); err != nil || r.State != run.Running {
		t.Fatalf("Get() = %+v, %v; want a running run", r, err)
	}
	if st, err := s.Cancel(context.Background(), id); err != nil || st != run.Running {
		t.Fatalf("Cancel() = %v, %v", st, err)
	}
	res := <-done
	if res.Status != run.StatusCancelled || !strings.Contains(res.Message, "CancelRun") {
		t.Errorf("result = %s %q, want CANCELLED through CancelRun", res.Status, res.Message)
	}
	if st, err := s.Cancel(context.Background(), id); err != nil || st != run.Finished {
		t.Errorf("second Cancel() = %v, %v; want a no-op on the finished run", st, err)
	}
	if _, err := s.Cancel(context.Background(), "nosuchrun"); !errdefs.IsNotFound(err) {
		t.Errorf("Cancel(unknown) = %v, want not found", err)
	}
}

type notifyStart struct {
	*recorder
	ids chan string
}

func (n *notifyStart) Started(s run.Started) error {
	n.recorder.Started(s)
	n.ids <- s.RunID
	return nil
}

func TestRunObserverFailureCancels(t *testing.T) {
	rt := fake.New(func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		for ctx.Err() == nil {
			io.WriteString(spec.Stdout, "tick\n")
			time.Sleep(time.Millisecond)
		}
		return runtime.Exit{Code: 137}
	})
	s := newService(t, rt, nil)
	rec := newRecorder()
	rec.failAt = 3
	res, err := s.Run(context.Background(), run.Request{Program: code("x")}, rec)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != run.StatusCancelled {
		t.Errorf("status = %s, want CANCELLED when the caller is gone", res.Status)
	}
}

func TestRunBadInputCreatesNothing(t *testing.T) {
	rt := fake.New(func(context.Context, runtime.Spec) runtime.Exit { return runtime.Exit{} })
	s := newService(t, rt, nil)
	tests := []struct {
		name  string
		req   run.Request
		check func(error) bool
		field string
	}{
		{name: "unknown language", req: run.Request{Program: &run.Program{Language: "cobol", Code: "x"}}, check: errdefs.IsInvalidArgument, field: "language"},
		{name: "unknown image", req: run.Request{Program: code("x"), Options: run.Options{Image: "alpine"}}, check: errdefs.IsInvalidArgument, field: "image"},
		{name: "unknown mount", req: run.Request{Program: code("x"), Options: run.Options{Mounts: []string{"secrets"}}}, check: errdefs.IsInvalidArgument, field: "mounts[0]"},
		{name: "mount not granted", req: run.Request{Program: code("x"), Options: run.Options{Mounts: []string{"data"}}}, check: errdefs.IsPermissionDenied, field: "mounts[0]"},
		{name: "unknown runtime", req: run.Request{Program: code("x"), Options: run.Options{Runtime: "kata"}}, check: errdefs.IsInvalidArgument, field: "runtime"},
		{name: "runtime not on this host", req: run.Request{Program: code("x"), Options: run.Options{Runtime: "runsc"}}, check: errdefs.IsFailedPrecondition, field: "runtime"},
		{name: "unknown network", req: run.Request{Program: code("x"), Options: run.Options{Network: netpolicy.Request{Mode: "host"}}}, check: errdefs.IsInvalidArgument, field: "network.mode"},
		{name: "allowlist without operator rules", req: run.Request{Program: code("x"), Options: run.Options{Network: netpolicy.Request{Mode: netpolicy.AllowList, Rules: []netpolicy.Rule{{Host: "pypi.internal"}}}}}, check: errdefs.IsPermissionDenied, field: "network.mode"},
		{name: "absurd memory", req: run.Request{Program: code("x"), Options: run.Options{Limits: limits.Limits{MemoryBytes: 1 << 50}}}, check: errdefs.IsInvalidArgument, field: "limits.memory_bytes"},
		{name: "negative timeout", req: run.Request{Program: code("x"), Options: run.Options{Limits: limits.Limits{Timeout: -time.Second}}}, check: errdefs.IsInvalidArgument, field: "limits.timeout_ms"},
		{name: "path traversal", req: run.Request{Program: code("x"), Options: run.Options{Files: []run.File{{Path: "../../etc/cron.d/x", Content: []byte("c")}}}}, check: errdefs.IsInvalidArgument, field: "files[0].path"},
		{name: "tools without tool servers", req: run.Request{Program: code("x"), Options: run.Options{Tools: []string{"orders.*"}}}, check: errdefs.IsInvalidArgument, field: "tools"},
		{name: "a tool record that is not one", req: run.Request{Program: code("x"), Options: run.Options{Tools: []string{"orders.*"}, ToolRecord: []byte("{not json")}}, check: errdefs.IsInvalidArgument, field: "tool_record"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Run(context.Background(), tt.req, newRecorder())
			if err == nil || !tt.check(err) {
				t.Fatalf("Run() = %v, want a classified error", err)
			}
			if !strings.HasPrefix(err.Error(), tt.field+":") {
				t.Errorf("error %q does not name %s", err, tt.field)
			}
		})
	}
	if n := len(rt.Specs()); n != 0 {
		t.Errorf("%d containers were started for bad requests", n)
	}
	assertNoTaskFolders(t, s)
}

func TestRunRefusedWhenBusy(t *testing.T) {
	rt := fake.New(untilKilled)
	s := newService(t, rt, func(c *Config) { c.MaxRunning = 1; c.MaxQueued = 0 })
	started := make(chan string, 1)
	go s.Run(context.Background(), run.Request{Program: code("x")}, &notifyStart{recorder: newRecorder(), ids: started})
	id := <-started
	start := time.Now()
	_, err := s.Run(context.Background(), run.Request{Program: code("x")}, newRecorder())
	var busy *BusyError
	if !errors.As(err, &busy) || !errdefs.IsResourceExhausted(err) {
		t.Fatalf("Run() while full = %v, want a resource-exhausted refusal", err)
	}
	if time.Since(start) > time.Second {
		t.Errorf("the refusal took %v; it must be immediate", time.Since(start))
	}
	s.Cancel(context.Background(), id)
}

func TestShutdownCancelsAndRefuses(t *testing.T) {
	rt := fake.New(untilKilled)
	s := newService(t, rt, nil)
	started := make(chan string, 1)
	done := make(chan run.Result, 1)
	go func() {
		res, _ := s.Run(context.Background(), run.Request{Program: code("x")}, &notifyStart{recorder: newRecorder(), ids: started})
		done <- res
	}()
	<-started
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if res := <-done; res.Status != run.StatusCancelled || !strings.Contains(res.Message, "shutting down") {
		t.Errorf("running task ended %s %q, want CANCELLED by the shutdown", res.Status, res.Message)
	}
	assertNoContainers(t, rt)
	if _, err := s.Run(context.Background(), run.Request{Program: code("x")}, newRecorder()); !errdefs.IsUnavailable(err) {
		t.Errorf("Run() after Shutdown = %v, want unavailable", err)
	}
}

func TestNewReapsWhatAnEarlierInstanceLeft(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	state := t.TempDir()
	// A task folder with a mounted, non-empty workspace, as kill -9 leaves it.
	ws := filepath.Join(state, "tasks", "default", "leftover", "workspace")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", ws, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(ws, unix.MNT_DETACH) })
	os.WriteFile(filepath.Join(ws, "out.txt"), []byte("x"), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(ws, "link"))

	rt := fake.New(untilKilled)
	if _, err := rt.Start(context.Background(), runtime.Spec{ID: "default-old", Image: "sha256:shell", Argv: []string{"sleep"},
		WorkingDir: "/", User: "1000:1000", Labels: map[string]string{LabelInstance: "default"},
		Resources: runtime.Resources{MemoryBytes: 1 << 20, CPUMillis: 100, Pids: 8, NoFile: 64},
		Stdout:    io.Discard, Stderr: io.Discard}); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.StateDir = state
	cfg.PoolSize = 0
	s, err := New(context.Background(), rt, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	assertNoTaskFolders(t, s)
	assertNoContainers(t, rt)
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Fatalf("reaping followed a task's link: %v", err)
	}
}

func TestInstancesSharingAStateDirLeaveEachOtherAlone(t *testing.T) {
	rt := fake.New(untilKilled)
	a := newService(t, rt, nil)
	started := make(chan string, 1)
	go a.Run(context.Background(), run.Request{Program: code("x")}, &notifyStart{recorder: newRecorder(), ids: started})
	id := <-started
	cfg := a.Config()
	cfg.Instance = "other"
	other, err := New(context.Background(), rt, cfg, testDisk())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Shutdown(context.Background())
	if _, err := os.Stat(filepath.Join(cfg.StateDir, "tasks", "default", id)); err != nil {
		t.Fatalf("another instance's start removed a running task's folder: %v", err)
	}
	if len(rt.Live()) != 1 {
		t.Fatalf("another instance's start removed a running task's container")
	}
	a.Cancel(context.Background(), id)
}

func TestRuntimePolicy(t *testing.T) {
	withRunsc := func() *fake.Runtime {
		rt := fake.New(func(context.Context, runtime.Spec) runtime.Exit { return runtime.Exit{} })
		rt.Runtimes = append(rt.Runtimes, runtime.OCIRuntime{Name: "runsc", Version: "gvisor"})
		return rt
	}
	t.Run("runsc required on a host without it", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.StateDir = t.TempDir()
		cfg.PoolSize = 0
		cfg.RequireRunsc = true
		_, err := New(context.Background(), fake.New(untilKilled), cfg, testDisk())
		if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "runsc") {
			t.Fatalf("New() = %v, want a refusal to start that names runsc", err)
		}
	})
	t.Run("runsc required", func(t *testing.T) {
		rt := withRunsc()
		s := newService(t, rt, func(c *Config) { c.RequireRunsc = true })
		_, err := s.Run(context.Background(), run.Request{Program: code("x")}, newRecorder())
		if err != nil || rt.Specs()[0].Runtime != "runsc" {
			t.Fatalf("a request naming no runtime: %v, ran on %q", err, rt.Specs()[0].Runtime)
		}
		_, err = s.Run(context.Background(), run.Request{Program: code("x"), Options: run.Options{Runtime: "runc"}}, newRecorder())
		if !errdefs.IsPermissionDenied(err) || !strings.HasPrefix(err.Error(), "runtime:") {
			t.Fatalf("a request for runc: %v, want permission denied", err)
		}
		inv, _ := s.Inventory(context.Background())
		for _, r := range inv.Runtimes {
			if r.Allowed != (r.Name == "runsc") {
				t.Errorf("inventory says %s allowed=%v", r.Name, r.Allowed)
			}
		}
		if inv.DefaultRuntime != "runsc" {
			t.Errorf("default runtime %q", inv.DefaultRuntime)
		}
	})
	t.Run("allow list", func(t *testing.T) {
		rt := withRunsc()
		s := newService(t, rt, func(c *Config) { c.AllowedRuntimes = []string{"runc"} })
		if _, err := s.Run(context.Background(), run.Request{Program: code("x"), Options: run.Options{Runtime: "runsc"}}, newRecorder()); !errdefs.IsPermissionDenied(err) {
			t.Fatalf("runsc when only runc is allowed: %v", err)
		}
		if _, err := s.Run(context.Background(), run.Request{Program: code("x"), Options: run.Options{Runtime: "runc"}}, newRecorder()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{name: "default", mutate: func(*Config) {}},
		{name: "bad instance", mutate: func(c *Config) { c.Instance = "Bad Name" }, wantErr: "instance"},
		{name: "relative state dir", mutate: func(c *Config) { c.StateDir = "state" }, wantErr: "state dir"},
		{name: "no slot", mutate: func(c *Config) { c.MaxRunning = 0 }, wantErr: "max running"},
		{name: "relative mount", mutate: func(c *Config) { c.Mounts = map[string]string{"x": "rel"} }, wantErr: "mount x"},
		{name: "bad mount name", mutate: func(c *Config) { c.Mounts = map[string]string{"../x": "/data"} }, wantErr: "mount name"},
		{name: "bad limits", mutate: func(c *Config) { c.Limits.Default.Pids = 0 }, wantErr: "default pids"},
		{name: "unknown default runtime", mutate: func(c *Config) { c.DefaultRuntime = "kata" }, wantErr: "default runtime"},
		{name: "runsc required, runc default", mutate: func(c *Config) { c.RequireRunsc = true; c.DefaultRuntime = "runc" }, wantErr: "runsc is required"},
		{name: "default not allowed", mutate: func(c *Config) { c.DefaultRuntime = "runc"; c.AllowedRuntimes = []string{"runsc"} }, wantErr: "not among the allowed"},
		{name: "unknown allowed runtime", mutate: func(c *Config) { c.AllowedRuntimes = []string{"kata"} }, wantErr: "allowed runtime"},
		{name: "crun only", mutate: func(c *Config) { c.DefaultRuntime = "crun"; c.AllowedRuntimes = []string{"crun"} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mutate(&c)
			err := c.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func code(c string) *run.Program { return &run.Program{Language: "python", Code: c} }

// TestCrunIsTheDefaultWhereTheEngineHasIt: a request that names no runtime
// runs on crun when the backend has it and the operator allows it, and on
// the backend's default otherwise or when the operator names one.
func TestCrunIsTheDefaultWhereTheEngineHasIt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		crun   bool
		mutate func(*Config)
		want   string
	}{
		{"the backend has crun", true, nil, "crun"},
		{"the backend has no crun", false, nil, "runc"},
		{"the operator allows runc only", true, func(c *Config) { c.AllowedRuntimes = []string{"runc"} }, "runc"},
		{"the operator names runc", true, func(c *Config) { c.DefaultRuntime = "runc" }, "runc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := fake.New(echo)
			if tc.crun {
				rt.Runtimes = append(rt.Runtimes, runtime.OCIRuntime{Name: "crun", Version: "fake"})
			}
			s := newService(t, rt, tc.mutate)
			rec := newRecorder()
			if _, err := s.Run(context.Background(), run.Request{Program: code("print(1)")}, rec); err != nil {
				t.Fatal(err)
			}
			if got := rec.started[0].Runtime; got != tc.want {
				t.Errorf("ran on %s, want %s", got, tc.want)
			}
		})
	}
}
