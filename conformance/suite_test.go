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
	// Backend names it: "docker", "containerd".
	Backend string
	// OCIRuntime is the OCI runtime every run asks for: "runc", "crun",
	// "runsc".
	OCIRuntime string
	// Leftovers lists the engine's containers that carry all of labels,
	// running or not.
	Leftovers func(ctx context.Context, labels map[string]string) ([]string, error)
	// WithEgress connects another backend of the same engine whose
	// allow-listed containers are linked to gw.
	WithEgress func(t testing.TB, gw runtime.EgressGateway, instance string) runtime.Runtime
}

// Run runs the cases that CI's matrix puts on target (every case under
// MatrixEnv=all): with the warm pool off (every task gets a container
// made for it) and on (every task that can takes a pooled container,
// whose limits are updated to the task's), then the groups.
func Run(t *testing.T, target Target) {
	testutil.RequireRoot(t)
	groups := suiteGroups(target)
	if !slices.ContainsFunc(groups, func(g grouped) bool { return g.runs(target) }) {
		t.Skipf("CI's matrix puts no case on %s/%s (docs/development.md): make test-matrix runs every case on every pair", target.Backend, target.OCIRuntime)
	}
	for _, g := range groups {
		g.run(t, target)
	}
}

// suiteGroups are the suite's groups in the order they run, each case
// with its axis (see Axis; docs/development.md has the table).
func suiteGroups(target Target) []grouped {
	return []grouped{
		group[*suite]{"", the(&suite{target: target}), []kase[*suite]{{"CancelledStartLeavesNothing", Backend, testCancelledStart}}},
		poolGroup("PoolOff", &suite{target: target}),
		networkGroup(),
		sessionGroup(),
		toolsGroup(),
		languageGroup(),
		judgeGroup(),
		extraGroup(),
		prestartGroup(),
		poolGroup("PoolOn", &suite{target: target, warm: true}),
	}
}

// runAllCases are the cases run with the pool off and on. A case that the
// container's source can change (limits updated on a pooled container,
// its folders, mounts, network, init and end) runs with the pool on on
// its axis's pairs, and off on the reference pair; one it cannot (a
// refusal before any container, what is read on the host side of the
// task's folders, the emitter and the writers' caps, the init's word on a
// missing command) runs with the pool off on its axis's pairs.
var runAllCases = []struct {
	kase[*suite]
	// source says the container's source can change the outcome.
	source bool
}{
	{kase[*suite]{"OutputIsStreamed", Backend, testOutputIsStreamed}, true},
	{kase[*suite]{"OutputFloodNoNewline", Backend, testOutputFloodNoNewline}, false},
	{kase[*suite]{"BinaryOutputIntact", Backend, testBinaryOutputIntact}, true},
	{kase[*suite]{"MemoryBombIsOOMKilled", Both, testMemoryBomb}, true},
	{kase[*suite]{"ForkBombStaysWithinPids", Both, testForkBomb}, true},
	{kase[*suite]{"TimeoutKillsBusyLoop", Backend, testTimeout}, true},
	{kase[*suite]{"TimeoutKillsSetsidChildIgnoringSIGTERM", Both, testTimeoutKillsEveryProcess}, true},
	{kase[*suite]{"CPUQuota", Both, testCPUQuota}, true},
	{kase[*suite]{"DiskLimit", Both, testDiskLimit}, true},
	{kase[*suite]{"Isolation", Both, testIsolation}, true},
	{kase[*suite]{"EgressBlocked", Both, testEgressBlocked}, true},
	{kase[*suite]{"StdinInputsMountsWorkdir", Both, testStdinInputsMounts}, true},
	{kase[*suite]{"MissingCommand", Logic, testMissingCommand}, false},
	{kase[*suite]{"CancelKillsWithinOneSecond", Backend, testCancel}, true},
	{kase[*suite]{"TenAtOnce", Backend, testTenAtOnce}, true},
	{kase[*suite]{"LargeWritesArriveWhole", Both, testLargeWritesArriveWhole}, false},
	{kase[*suite]{"LoopbackWorks", Both, testLoopbackWorks}, true},
	{kase[*suite]{"KernelIsTheOneAskedFor", OCIRuntime, testKernelIdentity}, true},
	{kase[*suite]{"BundleOfHostileWorkspace", OCIRuntime, testBundleOfHostileWorkspace}, false},
	{kase[*suite]{"SameProgramTwiceSameReproduciblePart", OCIRuntime, testSameProgramTwice}, true},
	{kase[*suite]{"InitIsClosedToTheProgram", OCIRuntime, testInitIsClosed}, true},
	{kase[*suite]{"EndKillsLeftoversAndKeepsLastWrites", OCIRuntime, testEndKillsLeftovers}, true},
	{kase[*suite]{"ChildOOMKillIsReported", Both, testChildOOMKill}, true},
	{kase[*suite]{"NothingGrowsPerTask", Backend, testNothingGrowsPerTask}, true},
	{kase[*suite]{"TaskFilesAreClosedToHostUsers", OCIRuntime, testTaskFilesClosed}, true},
	{kase[*suite]{"StalledCallerDoesNotPinTheRun", Logic, testStalledCaller}, false},
	{kase[*suite]{"MaximaAreHonoured", Both, testMaximaHonoured}, true},
	{kase[*suite]{"SeccompDeniesEachFamily", OCIRuntime, testSeccompDenies}, true},
	{kase[*suite]{"ImagesOutsideTheLockAreRefused", Backend, testImagesOutsideTheLock}, false},
	{kase[*suite]{"InitSurvivesTheProgramsSignals", OCIRuntime, testInitSurvivesSignals}, true},
	{kase[*suite]{"LeftoversEndUnderAForkStorm", OCIRuntime, testForkStorm}, true},
	{kase[*suite]{"NoHostPathInMountinfo", Both, testNoHostPathInMountinfo}, true},
	{kase[*suite]{"OutputFileNamesThatAreNotUTF8", Logic, testNonUTF8Names}, false},
}

// poolGroup is runAllCases with the pool off, or on (s.warm) with the
// pool's own cases after them.
func poolGroup(name string, s *suite) grouped {
	var cases []kase[*suite]
	for _, c := range runAllCases {
		switch {
		case s.warm && c.source:
			cases = append(cases, c.kase)
		case !s.warm && c.source:
			cases = append(cases, kase[*suite]{c.name, Logic, c.fn})
		case !s.warm:
			cases = append(cases, c.kase)
		}
	}
	if s.warm {
		cases = append(cases,
			kase[*suite]{"PooledContainerNeverReused", Backend, testPooledNeverReused},
			kase[*suite]{"ShutdownWhileFillingLeavesNothing", Backend, testShutdownWhileFilling})
	}
	return group[*suite]{name, the(s), cases}
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
	network   []run.NetworkEvent
	onStart   func(run.Started)
	onOutput  func(run.Stream, []byte)
}

func (o *observer) Network(ev run.NetworkEvent) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.network = append(o.network, ev)
	return nil
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
