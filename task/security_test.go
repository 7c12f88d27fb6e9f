package task

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/taskdir"
)

// operatorCtx is a context whose caller is the operator.
func operatorCtx() context.Context { return access.WithCaller(context.Background(), access.Operator) }

// failingChown is a disk whose Chown fails: a run fails after it has
// claimed its pooled container, while it prepares its folders.
type failingChown struct{ taskdir.Disk }

func (failingChown) Chown(*os.Root, string, int, int) error { return errors.New("chown failed") }

// TestAnErrorAfterTheClaimRemovesThePooledContainer is the regression test
// of a leak: a run that failed after claiming a pooled container left it
// running, and the pool made another, at each such request.
func TestAnErrorAfterTheClaimRemovesThePooledContainer(t *testing.T) {
	rt := fake.New(echo)
	cfg := DefaultConfig()
	cfg.StateDir, cfg.PoolSize, cfg.Prestart = t.TempDir(), 1, false
	cfg.AllowedImages = []string{"sha256:python", "sha256:shell"}
	s, err := New(context.Background(), rt, cfg, WithDisk(failingChown{taskdir.FolderDisk{}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	for range 3 {
		if err := s.PoolReady(context.Background()); err != nil {
			t.Fatal(err)
		}
		req := run.Request{Program: code("print(1)"), Options: run.Options{Workdir: "sub"}}
		if _, err := s.Run(context.Background(), req, newRecorder()); err == nil || !strings.Contains(err.Error(), "chown failed") {
			t.Fatalf("Run() = %v, want the folder's failure", err)
		}
	}
	assertNoContainers(t, rt)
	if err := s.PoolReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The claimed containers go in the runs' cleanup, after their results.
	live := rt.Live()
	for deadline := time.Now().Add(5 * time.Second); len(live) != 2 && time.Now().Before(deadline); live = rt.Live() {
		time.Sleep(5 * time.Millisecond)
	}
	if len(live) != 2 {
		t.Fatalf("%d containers live, want the pool's 2 (one per image) only: %v", len(live), live)
	}
}

// TestBadRequestsPanicNothingAndCreateNothing sends requests that are
// wrong in ways found by the outside review and by fuzzing to an engine
// with its pool on: each is refused by name, and only the pool's
// containers and folders are left.
func TestBadRequestsPanicNothingAndCreateNothing(t *testing.T) {
	rt := fake.New(echo)
	s := pooled(t, rt, 1, func(c *Config) { c.Mounts = map[string]string{"data": t.TempDir()} })
	long := strings.Repeat("a", 300)
	for _, tt := range []struct {
		name  string
		req   run.Request
		field string
	}{
		{"workdir name over 255 bytes", run.Request{Program: code("x"), Options: run.Options{Workdir: long}}, "workdir"},
		{"argv not UTF-8", run.Request{Command: &run.Command{Argv: []string{"echo", "\xff"}}}, "argv[1]"},
		{"shell not UTF-8", run.Request{Command: &run.Command{Shell: "echo \xfe"}}, "shell"},
		{"env value not UTF-8", run.Request{Program: code("x"), Options: run.Options{Env: map[string]string{"A": "\xff"}}}, "env[A]"},
		{"negative memory", run.Request{Program: code("x"), Options: run.Options{Limits: limits.Limits{MemoryBytes: -1}}}, "limits.memory_bytes"},
		{"cpu above the host", run.Request{Program: code("x"), Options: run.Options{Limits: limits.Limits{CPUMillis: 1 << 40}}}, "limits.cpu_millis"},
		{"mount not granted", run.Request{Program: code("x"), Options: run.Options{Mounts: []string{"data"}}}, "mounts[0]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.PoolReady(context.Background()); err != nil {
				t.Fatal(err)
			}
			_, err := s.Run(context.Background(), tt.req, newRecorder())
			if err == nil || !strings.HasPrefix(err.Error(), tt.field) {
				t.Fatalf("Run() = %v, want a refusal naming %s", err, tt.field)
			}
			assertNoContainers(t, rt)
			entries, _ := os.ReadDir(s.tasks)
			if len(entries) != 2 {
				t.Fatalf("task folders %v, want the pool's 2 only", entries)
			}
		})
	}
}

// TestMaximaFitTheHost lowers maxima that the backend's host cannot give:
// on a host of 2 CPUs, the maximum CPU is 2000 millicores, and a request
// for it runs.
func TestMaximaFitTheHost(t *testing.T) {
	rt := fake.New(echo)
	rt.CPUs, rt.MemoryBytes = 2, 1<<30
	s := newService(t, rt, nil)
	inv, err := s.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if inv.MaxLimits.CPUMillis != 2000 || inv.MaxLimits.MemoryBytes != 1<<30 || inv.DefaultLimits.MemoryBytes > 1<<30 {
		t.Fatalf("max %+v default %+v, want CPU and memory within the host's 2 CPUs and 1 GiB", inv.MaxLimits, inv.DefaultLimits)
	}
	req := run.Request{Program: code("x"), Options: run.Options{Limits: limits.Limits{CPUMillis: inv.MaxLimits.CPUMillis, MemoryBytes: inv.MaxLimits.MemoryBytes}}}
	if res, err := s.Run(context.Background(), req, newRecorder()); err != nil || res.Status != run.StatusOK {
		t.Fatalf("a run at the advertised maxima: %+v, %v", res, err)
	}
}

func TestMountsAreTheOperatorsToGrant(t *testing.T) {
	rt := fake.New(echo)
	s := newService(t, rt, func(c *Config) { c.Mounts = map[string]string{"data": t.TempDir(), "more": t.TempDir()} })
	req := run.Request{Program: code("x"), Options: run.Options{Mounts: []string{"data"}}}
	for _, tt := range []struct {
		name    string
		ctx     context.Context
		granted bool
	}{
		{"no caller", context.Background(), false},
		{"a token caller", access.WithCaller(context.Background(), access.Caller{Name: "token"}), false},
		{"a token caller granted another", access.WithCaller(context.Background(), access.Caller{Name: "token", Mounts: []string{"more"}}), false},
		{"a token caller granted it", access.WithCaller(context.Background(), access.Caller{Name: "token", Mounts: []string{"data"}}), true},
		{"the operator", operatorCtx(), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Run(tt.ctx, req, newRecorder())
			if tt.granted != (err == nil) || (!tt.granted && !errdefs.IsPermissionDenied(err)) {
				t.Fatalf("Run() = %v, granted %v", err, tt.granted)
			}
		})
	}
}

// TestOnlyImagesTheOperatorNamesRun refuses an image that carries the
// label of a sandbox image but is in neither the lock nor the allowed
// digests, and one that declares volumes; a lock rewritten while the
// daemon runs (images rebuilt) is read again.
func TestOnlyImagesTheOperatorNamesRun(t *testing.T) {
	rt := fake.New(echo)
	rt.Images["sandboxd/python"] = "sha256:" + strings.Repeat("1", 64)
	rt.Images["sandboxd/volume"] = "sha256:" + strings.Repeat("2", 64)
	rt.Volumes = map[string][]string{"sha256:" + strings.Repeat("2", 64): {"/data"}}
	lockPath := filepath.Join(t.TempDir(), "images.lock")
	s := newService(t, rt, func(c *Config) {
		c.AllowedImages = []string{"sha256:" + strings.Repeat("2", 64)}
		c.Catalog.Images = append(c.Catalog.Images, "sandboxd/volume")
	}, WithLock(images.OpenLock(lockPath)), withStore(t))
	python := run.Request{Program: code("x")}
	if _, err := s.Run(context.Background(), python, newRecorder()); !errdefs.IsPermissionDenied(err) || !strings.Contains(err.Error(), "image lock") {
		t.Fatalf("an image in no lock: %v, want permission denied", err)
	}
	lock := fmt.Sprintf(`{"images": [{"name": "sandboxd/python", "digest": "sha256:%s",
		"packages": [{"name": "bash", "version": "5.2.15-2+b7", "architecture": "amd64"}]}]}`, strings.Repeat("1", 64))
	if err := os.WriteFile(lockPath, []byte(lock), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(context.Background(), python, newRecorder())
	if err != nil || res.Status != run.StatusOK {
		t.Fatalf("an image of the rewritten lock: %+v, %v", res, err)
	}
	// Its bundle names what the lock says the image holds.
	if b, _ := readBundle(t, s, res.BundleDigest); !slices.Equal(b.Manifest.Reproducible.ImagePackages, []images.Package{{Name: "bash", Version: "5.2.15-2+b7", Architecture: "amd64"}}) {
		t.Errorf("the bundle's image packages: %+v", b.Manifest.Reproducible.ImagePackages)
	}
	volume := run.Request{Command: &run.Command{Argv: []string{"true"}}, Options: run.Options{Image: "sandboxd/volume"}}
	if _, err := s.Run(context.Background(), volume, newRecorder()); !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "volumes") {
		t.Fatalf("an image that declares volumes: %v, want failed precondition", err)
	}
	assertNoContainers(t, rt)
}

// TestEachContainerHasAUIDOfItsOwn checks the uids of containers: each in
// the range, none shared by two live containers, and pooled ones too.
func TestEachContainerHasAUIDOfItsOwn(t *testing.T) {
	rt := fake.New(untilKilled)
	s := pooled(t, rt, 2, nil)
	if err := s.PoolReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 3 {
		go s.Run(ctx, run.Request{Program: code("x")}, newRecorder())
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(rt.Running()) < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	seen := map[string]bool{}
	specs := rt.LiveSpecs()
	for _, spec := range specs {
		uid, gid := spec.IDs()
		if !s.cfg.UIDs.Contains(uid) || uid != gid || seen[spec.User] {
			t.Errorf("container %s runs as %s: want a uid of %s of its own", spec.ID, spec.User, s.cfg.UIDs)
		}
		seen[spec.User] = true
	}
	if len(specs) < 3 {
		t.Errorf("%d containers live for 3 runs", len(specs))
	}
}

// TestAStalledCallerDoesNotPinTheRun is the regression test of a caller
// that stops reading: its run still ends at its timeout, the slot is freed
// for the next run, and the caller is dropped after the stall timeout.
func TestAStalledCallerDoesNotPinTheRun(t *testing.T) {
	rt := fake.New(func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		for ctx.Err() == nil {
			spec.Stdout.Write([]byte(strings.Repeat("x", 4096)))
			time.Sleep(time.Millisecond)
		}
		return runtime.Exit{Code: 137}
	})
	s := newService(t, rt, func(c *Config) { c.MaxRunning, c.MaxQueued, c.StallTimeout = 1, 0, 500*time.Millisecond })
	stalled := &stalledRecorder{recorder: newRecorder(), release: make(chan struct{})}
	defer close(stalled.release)
	start := time.Now()
	_, err := s.Run(context.Background(), run.Request{Program: code("x"), Options: run.Options{Limits: limits.Limits{Timeout: 300 * time.Millisecond}}}, stalled)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("Run() = %v after %v, want the stalled caller dropped within the stall timeout", err, time.Since(start))
	}
	id := stalled.runID()
	rn, err := s.Get(context.Background(), id)
	if err != nil || rn.Result == nil || rn.Result.Status != run.StatusTimeout {
		t.Fatalf("Get() = %+v, %v; want the run finished with TIMEOUT", rn, err)
	}
	if res, err := s.Run(context.Background(), run.Request{Program: code("x"), Options: run.Options{Limits: limits.Limits{Timeout: 100 * time.Millisecond}}}, newRecorder()); err != nil || res.Status != run.StatusTimeout {
		t.Fatalf("the next run in the only slot: %+v, %v", res, err)
	}
}

// stalledRecorder takes the Started event, then blocks on output.
type stalledRecorder struct {
	*recorder
	release chan struct{}
}

func (s *stalledRecorder) Output(run.Stream, []byte) error {
	<-s.release
	return errors.New("gone")
}
