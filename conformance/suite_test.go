//go:build integration

package conformance

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/run"
)

// Target is one backend and OCI runtime pair under test.
type Target struct {
	// Runtime is the backend.
	Runtime runtime.Runtime
	// OCIRuntime is the OCI runtime every run asks for: "runc", "crun",
	// "runsc".
	OCIRuntime string
	// Languages runs the per-language smoke tests on this pair too.
	Languages bool
	// Leftovers lists the engine's containers that carry all of labels,
	// running or not.
	Leftovers func(ctx context.Context, labels map[string]string) ([]string, error)
	// WithEgress connects another backend of the same engine whose
	// allow-listed containers are linked to gw.
	WithEgress func(t testing.TB, gw runtime.EgressGateway, instance string) runtime.Runtime
}

// Run runs the suite against target twice: with the warm pool off (every
// task gets a container made for it) and on (every task that can takes a
// pooled container, whose limits are updated to the task's), where every
// case a pooled container could fail must pass the same (see runAll).
func Run(t *testing.T, target Target) {
	testutil.RequireRoot(t)
	t.Run("CancelledStartLeavesNothing", func(t *testing.T) { testCancelledStart(t, &suite{target: target}) })
	t.Run("PoolOff", func(t *testing.T) { runAll(t, &suite{target: target}) })
	t.Run("Network", func(t *testing.T) { testNetwork(t, target) })
	t.Run("Sessions", func(t *testing.T) { testSessions(t, target) })
	t.Run("Tools", func(t *testing.T) { testTools(t, target) })
	if target.Languages {
		t.Run("Languages", func(t *testing.T) { testLanguages(t, target) })
	}
	t.Run("Prestart", func(t *testing.T) { testPrestart(t, target) })
	t.Run("PoolOn", func(t *testing.T) {
		s := &suite{target: target, warm: true}
		runAll(t, s)
		t.Run("PooledContainerNeverReused", func(t *testing.T) { testPooledNeverReused(t, s) })
		t.Run("ShutdownWhileFillingLeavesNothing", func(t *testing.T) { testShutdownWhileFilling(t, s) })
	})
}

// runAll runs the cases on s. With the pool on (s.warm) it leaves out
// those the container's source cannot change: a refusal before any
// container, what is read on the host side of the task's folders (the
// bundle, the outputs), the emitter and the writers' caps, the init's
// word on a missing command. They run with the pool off; every case that
// a pooled container could fail (limits updated on it, its folders,
// mounts, network, init and end) runs both ways.
func runAll(t *testing.T, s *suite) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, *suite)
		// poolOff runs the case with the pool off only.
		poolOff bool
	}{
		{"OutputIsStreamed", testOutputIsStreamed, false},
		{"OutputFloodNoNewline", testOutputFloodNoNewline, true},
		{"BinaryOutputIntact", testBinaryOutputIntact, false},
		{"MemoryBombIsOOMKilled", testMemoryBomb, false},
		{"ForkBombStaysWithinPids", testForkBomb, false},
		{"TimeoutKillsBusyLoop", testTimeout, false},
		{"TimeoutKillsSetsidChildIgnoringSIGTERM", testTimeoutKillsEveryProcess, false},
		{"CPUQuota", testCPUQuota, false},
		{"DiskLimit", testDiskLimit, false},
		{"Isolation", testIsolation, false},
		{"EgressBlocked", testEgressBlocked, false},
		{"StdinInputsMountsWorkdir", testStdinInputsMounts, false},
		{"MissingCommand", testMissingCommand, true},
		{"CancelKillsWithinOneSecond", testCancel, false},
		{"TenAtOnce", testTenAtOnce, false},
		{"LargeWritesArriveWhole", testLargeWritesArriveWhole, true},
		{"LoopbackWorks", testLoopbackWorks, false},
		{"KernelIsTheOneAskedFor", testKernelIdentity, false},
		{"BundleOfHostileWorkspace", testBundleOfHostileWorkspace, true},
		{"SameProgramTwiceSameReproduciblePart", testSameProgramTwice, false},
		{"InitIsClosedToTheProgram", testInitIsClosed, false},
		{"EndKillsLeftoversAndKeepsLastWrites", testEndKillsLeftovers, false},
		{"ChildOOMKillIsReported", testChildOOMKill, false},
		{"NothingGrowsPerTask", testNothingGrowsPerTask, false},
		{"TaskFilesAreClosedToHostUsers", testTaskFilesClosed, false},
		{"StalledCallerDoesNotPinTheRun", testStalledCaller, true},
		{"MaximaAreHonoured", testMaximaHonoured, false},
		{"SeccompDeniesEachFamily", testSeccompDenies, false},
		{"ImagesOutsideTheLockAreRefused", testImagesOutsideTheLock, true},
		{"InitSurvivesTheProgramsSignals", testInitSurvivesSignals, false},
		{"LeftoversEndUnderAForkStorm", testForkStorm, false},
		{"NoHostPathInMountinfo", testNoHostPathInMountinfo, false},
		{"OutputFileNamesThatAreNotUTF8", testNonUTF8Names, true},
	} {
		if s.warm && tc.poolOff {
			continue
		}
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, s) })
	}
}

type suite struct {
	target Target
	// warm runs every task that can in a pooled container; prestart has
	// the pooled containers of Python pre-start their interpreter.
	warm, prestart bool
	// taskOpts are more options of the services it starts.
	taskOpts []task.Option
	// catalog is what its services serve; empty for python's and the
	// shell's images, which the tests but testLanguages use: a pool keeps
	// containers of every image in the catalog.
	catalog images.Catalog
}

// builtinOnly is the catalog of the named built-in images.
func builtinOnly(t *testing.T, names ...string) images.Catalog {
	var recipes []images.Recipe
	for _, r := range images.Builtin() {
		if slices.Contains(names, r.Name) {
			recipes = append(recipes, r)
		}
	}
	c, err := images.NewCatalog(recipes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// gvisor says whether the programs run on gVisor's kernel.
func (s *suite) gvisor() bool { return s.target.OCIRuntime == runtime.RunscName }

// service starts an engine on the target with its state in a temp folder
// and a host folder configured as the mount "data". Its cleanup checks that
// every container and task folder is gone.
func (s *suite) service(t *testing.T, mutate func(*task.Config)) *task.Service {
	t.Helper()
	cfg := task.DefaultConfig()
	cfg.Instance = fmt.Sprintf("conf-%d", time.Now().UnixNano()%1e9)
	cfg.StateDir = t.TempDir()
	cfg.DefaultRuntime = s.target.OCIRuntime
	cfg.MaxRunning = 10
	data := t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "dataset.txt"), []byte("operator data\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Mounts = map[string]string{"data": data}
	store, err := artifacts.OpenStore(t.TempDir(), artifacts.DefaultStoreOptions())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Catalog = s.catalog
	if len(cfg.Catalog.Recipes) == 0 {
		cfg.Catalog = builtinOnly(t, "sandboxd/python", "sandboxd/shell")
	}
	cfg.PoolSize = 0
	if s.warm {
		cfg.PoolSize = 1
	}
	cfg.Prestart = s.prestart
	if mutate != nil {
		mutate(&cfg)
	}
	// The images the set-up built, as the daemon allows them.
	opts := []task.Option{task.WithLogger(testutil.Logger(t, slog.LevelWarn)), task.WithArtifacts(store), task.WithLock(images.OpenLock(images.DefaultLockPath))}
	svc, err := task.New(context.Background(), s.target.Runtime, cfg, append(opts, s.taskOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := svc.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		s.assertNothingLeft(t, map[string]string{task.LabelInstance: cfg.Instance}, filepath.Join(cfg.StateDir, "tasks", cfg.Instance))
	})
	return svc
}

// assertNothingLeft checks that no container with labels and no task
// folder in tasksDir remains, once the cleanup that follows a run's result
// has had its moment.
func (s *suite) assertNothingLeft(t *testing.T, labels map[string]string, tasksDir string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var left []string
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		left, err = s.target.Leftovers(ctx, labels)
		if err != nil || len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Errorf("list leftovers: %v", err)
	}
	if len(left) > 0 {
		t.Errorf("containers left behind: %v", left)
	}
	if tasksDir != "" {
		entries, _ := os.ReadDir(tasksDir)
		if len(entries) > 0 {
			t.Errorf("task folders left behind: %v", entries)
		}
	}
}

// noContainerOfRun is the closing check of every test: nothing of this run
// is left in the engine.
func (s *suite) noContainerOfRun(t *testing.T, id string) {
	t.Helper()
	s.assertNothingLeft(t, map[string]string{task.LabelRun: id}, "")
}

// chunk is one piece of output and when it arrived.
type chunk struct {
	stream run.Stream
	data   []byte
	at     time.Time
}

// observer records a run's events.
type observer struct {
	mu        sync.Mutex
	started   *run.Started
	startedAt time.Time
	chunks    []chunk
	onStart   func(run.Started)
	onOutput  func(run.Stream, []byte)
}

func (o *observer) Started(s run.Started) error {
	o.mu.Lock()
	o.started, o.startedAt = &s, time.Now()
	fn := o.onStart
	o.mu.Unlock()
	if fn != nil {
		fn(s)
	}
	return nil
}

func (o *observer) Output(s run.Stream, p []byte) error {
	o.mu.Lock()
	o.chunks = append(o.chunks, chunk{stream: s, data: bytes.Clone(p), at: time.Now()})
	fn := o.onOutput
	o.mu.Unlock()
	if fn != nil {
		fn(s, p)
	}
	return nil
}

func (o *observer) output(s run.Stream) []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	var b []byte
	for _, c := range o.chunks {
		if c.stream == s {
			b = append(b, c.data...)
		}
	}
	return b
}

// run runs a request and fails the test on an RPC-level error. In the warm
// suite it first waits for the pool, and checks that the task ran in a
// pooled container unless it needs one of its own (operator mounts, a
// disk size of its own).
func (s *suite) run(t *testing.T, svc *task.Service, req run.Request, obs *observer) run.Result {
	t.Helper()
	if obs == nil {
		obs = &observer{}
	}
	ctx, cancel := context.WithTimeout(access.WithCaller(context.Background(), access.Operator), 2*time.Minute)
	defer cancel()
	if s.warm {
		if err := svc.PoolReady(ctx); err != nil {
			t.Fatalf("the pool did not fill: %v", err)
		}
	}
	called := time.Now()
	res, err := svc.Run(ctx, req, obs)
	if err != nil {
		t.Fatalf("Run() = %v", err)
	}
	// The program's time is within the call's, whenever its container
	// was started.
	if took := time.Since(called); res.Duration <= 0 || res.Duration > took {
		t.Errorf("the program ran %v in a call of %v", res.Duration, took)
	}
	if s.warm && res.Start != run.StartWarm && !strings.Contains(res.ColdReason, "mounts") && !strings.Contains(res.ColdReason, "disk size") {
		t.Errorf("the run was cold in the warm suite: %s", res.ColdReason)
	}
	return res
}

func python(code string, lim limits.Limits) run.Request {
	return run.Request{Program: &run.Program{Language: "python", Code: code}, Options: run.Options{Limits: lim}}
}

// asOperator is the context of the suite's lookups: the operator's, who
// sees every tenant's runs, sessions and bundles.
var asOperator = access.WithCaller(context.Background(), access.Operator)

// readBundle verifies a run's stored bundle and returns it with its entries.
func readBundle(t *testing.T, svc *task.Service, res run.Result) (*artifacts.Bundle, map[string][]byte) {
	t.Helper()
	if res.BundleDigest == "" {
		t.Fatalf("the run left no bundle: %s", res.BundleError)
	}
	f, err := svc.OpenBundle(asOperator, res.BundleDigest)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entries := map[string][]byte{}
	b, err := artifacts.Verify(f, res.BundleDigest, artifacts.DefaultReadLimits(), func(p string, r io.Reader) error {
		var err error
		entries[p], err = io.ReadAll(r)
		return err
	})
	if err != nil {
		t.Fatalf("the run's bundle does not verify: %v", err)
	}
	return b, entries
}
