// Package conformance is the behaviour every runtime backend must show,
// checked with real containers through the task engine: output streaming and
// caps, memory, pids, CPU, disk and time limits, isolation, network, stdin
// and inputs, cancellation, bundles, and that nothing is left behind. Each
// backend's integration test runs Run against its engine, once per OCI
// runtime it has.
//
// Where gVisor (runsc) really behaves differently from the host kernel, the
// suite checks gVisor's behaviour, and says so:
//
//   - The program's processes live inside gVisor's kernel: the host's /proc
//     does not show them (the kill of every process is checked from inside).
//   - /proc/version and dmesg name gVisor, not the host's kernel.
//   - The pids limit is RLIMIT_NPROC, enforced by gVisor's kernel per sandbox
//     (fork fails with EAGAIN as under runc); see lifecycle.PidsLimits.
//   - Writing to a read-only mount fails with EACCES rather than EROFS.
//   - /proc/self/status shows Seccomp 0: the host filters gVisor itself,
//     not the program.
//   - There is no /sys/class/net; interfaces are listed with if_nameindex.
//   - FIFOs and sockets a program makes in /workspace stay inside gVisor:
//     the host, and so the bundle, does not see them.
//   - A write to a stdout pipe may be short where Linux blocks; buffered
//     writers retry, which is why the python image line-buffers stdout
//     rather than unbuffering it.
package conformance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/internal/lifecycle"
	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task"
)

// Target is one backend and OCI runtime pair under test.
type Target struct {
	// Runtime is the backend.
	Runtime runtime.Runtime
	// OCIRuntime is the OCI runtime every run asks for: "runc", "runsc".
	OCIRuntime string
	// Leftovers lists the engine's containers that carry all of labels,
	// running or not.
	Leftovers func(ctx context.Context, labels map[string]string) ([]string, error)
}

// Run runs the whole suite against target twice: with the warm pool off
// (every task gets a container made for it) and on (every task that can
// takes a pooled container, whose limits are updated to the task's). Both
// must pass the same.
func Run(t *testing.T, target Target) {
	testutil.RequireRoot(t)
	t.Run("CancelledStartLeavesNothing", func(t *testing.T) { testCancelledStart(t, &suite{target: target}) })
	t.Run("PoolOff", func(t *testing.T) { runAll(t, &suite{target: target}) })
	t.Run("PoolOn", func(t *testing.T) {
		s := &suite{target: target, warm: true}
		runAll(t, s)
		t.Run("PooledContainerNeverReused", func(t *testing.T) { testPooledNeverReused(t, s) })
		t.Run("ShutdownWhileFillingLeavesNothing", func(t *testing.T) { testShutdownWhileFilling(t, s) })
	})
}

func runAll(t *testing.T, s *suite) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, *suite)
	}{
		{"OutputIsStreamed", testOutputIsStreamed},
		{"OutputFloodNoNewline", testOutputFloodNoNewline},
		{"BinaryOutputIntact", testBinaryOutputIntact},
		{"MemoryBombIsOOMKilled", testMemoryBomb},
		{"ForkBombStaysWithinPids", testForkBomb},
		{"TimeoutKillsBusyLoop", testTimeout},
		{"TimeoutKillsSetsidChildIgnoringSIGTERM", testTimeoutKillsEveryProcess},
		{"CPUQuota", testCPUQuota},
		{"DiskLimit", testDiskLimit},
		{"Isolation", testIsolation},
		{"EgressBlocked", testEgressBlocked},
		{"StdinInputsMountsWorkdir", testStdinInputsMounts},
		{"MissingCommand", testMissingCommand},
		{"CancelKillsWithinOneSecond", testCancel},
		{"TenAtOnce", testTenAtOnce},
		{"LargeWritesArriveWhole", testLargeWritesArriveWhole},
		{"LoopbackWorks", testLoopbackWorks},
		{"KernelIsTheOneAskedFor", testKernelIdentity},
		{"BundleOfHostileWorkspace", testBundleOfHostileWorkspace},
		{"SameProgramTwiceSameReproduciblePart", testSameProgramTwice},
		{"InitIsClosedToTheProgram", testInitIsClosed},
		{"EndKillsLeftoversAndKeepsLastWrites", testEndKillsLeftovers},
		{"ChildOOMKillIsReported", testChildOOMKill},
		{"NothingGrowsPerTask", testNothingGrowsPerTask},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, s) })
	}
}

type suite struct {
	target Target
	// warm runs every task that can in a pooled container.
	warm bool
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
	cfg.Artifacts = store
	cfg.PoolSize = 0
	if s.warm {
		cfg.PoolSize = 1
	}
	if mutate != nil {
		mutate(&cfg)
	}
	svc, err := task.New(context.Background(), s.target.Runtime, cfg, task.WithLogger(testutil.Logger(t, slog.LevelWarn)))
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
	stream task.Stream
	data   []byte
	at     time.Time
}

// observer records a run's events.
type observer struct {
	mu        sync.Mutex
	started   *task.Started
	startedAt time.Time
	chunks    []chunk
	onStart   func(task.Started)
	onOutput  func(task.Stream, []byte)
}

func (o *observer) Started(s task.Started) error {
	o.mu.Lock()
	o.started, o.startedAt = &s, time.Now()
	fn := o.onStart
	o.mu.Unlock()
	if fn != nil {
		fn(s)
	}
	return nil
}

func (o *observer) Output(s task.Stream, p []byte) error {
	o.mu.Lock()
	o.chunks = append(o.chunks, chunk{stream: s, data: bytes.Clone(p), at: time.Now()})
	fn := o.onOutput
	o.mu.Unlock()
	if fn != nil {
		fn(s, p)
	}
	return nil
}

func (o *observer) output(s task.Stream) []byte {
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
func (s *suite) run(t *testing.T, svc *task.Service, req task.Request, obs *observer) task.Result {
	t.Helper()
	if obs == nil {
		obs = &observer{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
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
	if s.warm && res.Start != task.StartWarm && !strings.Contains(res.ColdReason, "mounts") && !strings.Contains(res.ColdReason, "disk size") {
		t.Errorf("the run was cold in the warm suite: %s", res.ColdReason)
	}
	return res
}

func python(code string, lim limits.Limits) task.Request {
	return task.Request{Program: &task.Program{Language: "python", Code: code}, Options: task.Options{Limits: lim}}
}

func testOutputIsStreamed(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	obs := &observer{}
	res := s.run(t, svc, python("import time\nprint('first')\ntime.sleep(2)\nprint('second')", limits.Limits{}), obs)
	defer s.noContainerOfRun(t, res.RunID)
	if res.Status != task.StatusOK {
		t.Fatalf("status = %s (%s)", res.Status, res.Message)
	}
	var first, second time.Time
	for _, c := range obs.chunks {
		if bytes.Contains(c.data, []byte("first")) && first.IsZero() {
			first = c.at
		}
		if bytes.Contains(c.data, []byte("second")) {
			second = c.at
		}
	}
	if first.IsZero() || second.IsZero() {
		t.Fatalf("chunks = %q, want first and second", obs.output(task.Stdout))
	}
	// The program sleeps 2 s between the two prints: the first must have
	// arrived well before the second was even written.
	if gap := second.Sub(first); gap < 1500*time.Millisecond {
		t.Fatalf("first arrived only %v before second: output was not streamed", gap)
	}
}

// vmHWM reads this process's peak resident memory.
func vmHWM(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}

func testOutputFloodNoNewline(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	// Reset the peak-RSS mark so that VmHWM measures this run only.
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatalf("reset peak RSS: %v", err)
	}
	before := vmHWM(t)
	var delivered int64
	obs := &observer{}
	obs.onOutput = func(_ task.Stream, p []byte) { delivered += int64(len(p)) }
	code := "import sys\nblock = b'x' * (1 << 20)\nfor _ in range(100):\n    sys.stdout.buffer.write(block)\n"
	res := s.run(t, svc, python(code, limits.Limits{Timeout: 60 * time.Second}), obs)
	defer s.noContainerOfRun(t, res.RunID)
	// The observer keeps chunks; drop them before measuring nothing else.
	obs.chunks = nil
	grown := vmHWM(t) - before
	if res.Status != task.StatusOutputLimit {
		t.Errorf("status = %s (%s), want OUTPUT_LIMIT", res.Status, res.Message)
	}
	if delivered != res.Limits.StdoutBytes {
		t.Errorf("delivered %d bytes, want exactly the cap %d", delivered, res.Limits.StdoutBytes)
	}
	if !res.StdoutTruncated || res.StdoutTotal <= res.Limits.StdoutBytes {
		t.Errorf("truncated = %v total = %d, want truncated with the total counted", res.StdoutTruncated, res.StdoutTotal)
	}
	if grown > 64<<20 {
		t.Errorf("the daemon's peak RSS grew by %d MiB, want under 64 MiB", grown>>20)
	}
	t.Logf("delivered %d of %d bytes; peak RSS grew %d KiB", delivered, res.StdoutTotal, grown>>10)
}

func testBinaryOutputIntact(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	obs := &observer{}
	code := "import sys\nb = bytes(range(256)) * 4\nsys.stdout.buffer.write(b)\nsys.stdout.flush()\nsys.stderr.buffer.write(b[::-1])\n"
	res := s.run(t, svc, python(code, limits.Limits{}), obs)
	defer s.noContainerOfRun(t, res.RunID)
	want := bytes.Repeat(func() []byte {
		b := make([]byte, 256)
		for i := range b {
			b[i] = byte(i)
		}
		return b
	}(), 4)
	if got := obs.output(task.Stdout); !bytes.Equal(got, want) {
		t.Errorf("stdout is %d bytes and differs from the 1024 written", len(got))
	}
	rev := bytes.Clone(want)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	if got := obs.output(task.Stderr); !bytes.Equal(got, rev) {
		t.Errorf("stderr is %d bytes and differs from the 1024 written", len(got))
	}
}

func testMemoryBomb(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	code := "blocks = []\nwhile True:\n    blocks.append(bytearray(8 << 20))\n"
	res := s.run(t, svc, python(code, limits.Limits{MemoryBytes: 128 << 20, Timeout: 60 * time.Second}), nil)
	defer s.noContainerOfRun(t, res.RunID)
	if res.Status != task.StatusOOMKilled {
		t.Fatalf("status = %s (%s), want OOM_KILLED", res.Status, res.Message)
	}
	if res.PeakMemoryBytes > 0 && res.PeakMemoryBytes > 130<<20 {
		t.Errorf("peak memory %d is above the 128 MiB limit", res.PeakMemoryBytes)
	}
}

func testForkBomb(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	// Count how many processes the program can make: fewer than the limit.
	counter := `import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        n += 1
except OSError as e:
    print(n, e.errno)
`
	res := s.run(t, svc, python(counter, limits.Limits{Pids: 32, Timeout: 20 * time.Second}), nil)
	s.noContainerOfRun(t, res.RunID)
	obs := &observer{}
	res = s.run(t, svc, python(counter, limits.Limits{Pids: 32, Timeout: 20 * time.Second}), obs)
	s.noContainerOfRun(t, res.RunID)
	var n, errno int
	if _, err := fmt.Sscan(string(obs.output(task.Stdout)), &n, &errno); err != nil {
		t.Fatalf("stdout %q: %v", obs.output(task.Stdout), err)
	}
	// The limit leaves room for the init's threads (lifecycle.PidsLimits):
	// the program gets at least its 32, and not much more.
	if n < 32-1 || n >= 32+lifecycle.InitThreads || errno != 11 {
		t.Errorf("made %d processes (errno %d), want about the limit of 32, then EAGAIN", n, errno)
	}

	// The classic bomb ends with a status, and the daemon keeps serving.
	bomb := task.Request{Command: &task.Command{Shell: "b() { b | b & }; b"},
		Options: task.Options{Limits: limits.Limits{Pids: 64, Timeout: 3 * time.Second}}}
	res = s.run(t, svc, bomb, nil)
	s.noContainerOfRun(t, res.RunID)
	if res.Status == "" {
		t.Fatal("the fork bomb ended without a status")
	}
	after := &observer{}
	res = s.run(t, svc, python("print('still serving')", limits.Limits{}), after)
	defer s.noContainerOfRun(t, res.RunID)
	if res.Status != task.StatusOK || string(after.output(task.Stdout)) != "still serving\n" {
		t.Fatalf("after the bomb: %s %q", res.Status, after.output(task.Stdout))
	}
}

func testTimeout(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	obs := &observer{}
	res := s.run(t, svc, python("while True: pass", limits.Limits{Timeout: 2 * time.Second}), obs)
	ended := time.Now()
	defer s.noContainerOfRun(t, res.RunID)
	if res.Status != task.StatusTimeout {
		t.Fatalf("status = %s (%s), want TIMEOUT", res.Status, res.Message)
	}
	if took := ended.Sub(obs.startedAt); took > 3*time.Second {
		t.Fatalf("a 2 s timeout ended %v after the start, want within 3 s", took)
	}
}

// processWithArg reports whether any host process has arg in its argv.
func processWithArg(arg string) bool {
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err == nil && bytes.Contains(b, []byte(arg)) {
			return true
		}
	}
	return false
}

func testTimeoutKillsEveryProcess(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	marker := fmt.Sprintf("sbxmarker%d", time.Now().UnixNano())
	// The program ignores SIGTERM and leaves a child in a session of its own.
	script := fmt.Sprintf("trap '' TERM\nsetsid bash -c 'trap \"\" TERM; exec -a %s sleep 1000' &\necho ready\nwhile :; do sleep 1; done\n", marker)
	seen := make(chan bool, 1)
	obs := &observer{}
	obs.onOutput = func(_ task.Stream, p []byte) {
		if bytes.Contains(p, []byte("ready")) {
			time.Sleep(200 * time.Millisecond)
			select {
			case seen <- processWithArg(marker):
			default:
			}
		}
	}
	req := task.Request{Program: &task.Program{Language: "bash", Code: script},
		Options: task.Options{Limits: limits.Limits{Timeout: 2 * time.Second}}}
	res := s.run(t, svc, req, obs)
	defer s.noContainerOfRun(t, res.RunID)
	if res.Status != task.StatusTimeout {
		t.Fatalf("status = %s (%s), want TIMEOUT", res.Status, res.Message)
	}
	if !s.gvisor() {
		select {
		case ok := <-seen:
			if !ok {
				t.Fatal("the setsid child never showed on the host: the test would prove nothing")
			}
		default:
			t.Fatal("the program never said ready")
		}
	}
	if processWithArg(marker) {
		t.Fatal("the setsid child survived the timeout")
	}
}

// testCPUQuota times a fixed piece of pure computation with a whole core
// and with a quarter of one: the quarter must take about four times as
// long. (Pure computation: a loop of system calls would measure gVisor's
// own overhead, which shares the quota, rather than the quota.)
func testCPUQuota(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	code := `import time
start = time.monotonic()
n = 0
for i in range(12_000_000):
    n += i
print(time.monotonic() - start)
`
	// Interleaved rounds, so that a busy moment of the machine (which slows
	// the whole core more than the quarter) does not decide.
	took := map[int64][]float64{}
	for range 3 {
		for _, millis := range []int64{1000, 250} {
			obs := &observer{}
			res := s.run(t, svc, python(code, limits.Limits{CPUMillis: millis, Timeout: time.Minute}), obs)
			s.noContainerOfRun(t, res.RunID)
			var secs float64
			if _, err := fmt.Sscan(string(obs.output(task.Stdout)), &secs); err != nil {
				t.Fatalf("stdout %q: %v", obs.output(task.Stdout), err)
			}
			took[millis] = append(took[millis], secs)
		}
	}
	median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	slower := median(took[250]) / median(took[1000])
	t.Logf("the same work took %.2fx as long on a quarter of a core (%v s vs %v s)", slower, took[250], took[1000])
	if slower < 2.5 {
		t.Errorf("a quarter of a core took only %.2fx as long as a whole core; want about 4x", slower)
	}
}

func testDiskLimit(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	obs := &observer{}
	code := `import errno
for path in ('/workspace/big', '/tmp/big'):
    try:
        with open(path, 'wb') as f:
            for _ in range(64):
                f.write(b'x' * (1 << 20))
        print(path, 'ok')
    except OSError as e:
        print(path, errno.errorcode[e.errno])
`
	res := s.run(t, svc, python(code, limits.Limits{DiskBytes: 16 << 20, MemoryBytes: 256 << 20}), obs)
	defer s.noContainerOfRun(t, res.RunID)
	want := "/workspace/big ENOSPC\n/tmp/big ENOSPC\n"
	if got := string(obs.output(task.Stdout)); got != want {
		t.Fatalf("stdout = %q, want %q", got, want)
	}
}

func testIsolation(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	obs := &observer{}
	code := `import json, os
def write(path):
    try:
        with open(path, 'w') as f: f.write('x')
        return 'ok'
    except OSError as e:
        return e.strerror
status = dict(l.split(':\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\t' in l)
print(json.dumps({
    'root': write('/evil'), 'usr': write('/usr/evil'), 'input_new': write('/input/evil'),
    'input_file': write('/input/data.txt'), 'code': write('/code/main.py'),
    'workspace': write('/workspace/ok'), 'tmp': write('/tmp/ok'),
    'uid': os.getuid(), 'gid': os.getgid(), 'cap_eff': status['CapEff'].strip(),
    'cap_bnd': status['CapBnd'].strip(), 'no_new_privs': status['NoNewPrivs'].strip(),
    'seccomp': status['Seccomp'].strip(), 'net': sorted(name for _, name in __import__('socket').if_nameindex()),
    'hostname': os.uname().nodename, 'nofile': __import__('resource').getrlimit(__import__('resource').RLIMIT_NOFILE),
    'core': __import__('resource').getrlimit(__import__('resource').RLIMIT_CORE),
}))
`
	req := python(code, limits.Limits{})
	req.Options.Files = []task.File{{Path: "data.txt", Content: []byte("input")}}
	res := s.run(t, svc, req, obs)
	defer s.noContainerOfRun(t, res.RunID)
	var got struct {
		Root       string   `json:"root"`
		Usr        string   `json:"usr"`
		InputNew   string   `json:"input_new"`
		InputFile  string   `json:"input_file"`
		Code       string   `json:"code"`
		Workspace  string   `json:"workspace"`
		Tmp        string   `json:"tmp"`
		UID        int      `json:"uid"`
		GID        int      `json:"gid"`
		CapEff     string   `json:"cap_eff"`
		CapBnd     string   `json:"cap_bnd"`
		NoNewPrivs string   `json:"no_new_privs"`
		Seccomp    string   `json:"seccomp"`
		Net        []string `json:"net"`
		Hostname   string   `json:"hostname"`
		NoFile     []int64  `json:"nofile"`
		Core       []int64  `json:"core"`
	}
	out := obs.output(task.Stdout)
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("stdout %q (stderr %q): %v", out, obs.output(task.Stderr), err)
	}
	for name, v := range map[string]string{"/": got.Root, "/usr": got.Usr, "/input (new file)": got.InputNew,
		"/input (given file)": got.InputFile, "/code": got.Code} {
		if v == "ok" {
			t.Errorf("writing to %s succeeded", name)
		}
	}
	if got.Workspace != "ok" || got.Tmp != "ok" {
		t.Errorf("writing to /workspace: %s, /tmp: %s; want both ok", got.Workspace, got.Tmp)
	}
	if got.UID == 0 || got.GID == 0 {
		t.Errorf("uid %d gid %d, want not root", got.UID, got.GID)
	}
	if got.CapEff != "0000000000000000" || got.CapBnd != "0000000000000000" {
		t.Errorf("CapEff %s CapBnd %s, want none", got.CapEff, got.CapBnd)
	}
	if got.NoNewPrivs != "1" {
		t.Errorf("NoNewPrivs = %s, want 1", got.NoNewPrivs)
	}
	if len(got.Net) != 1 || got.Net[0] != "lo" {
		t.Errorf("network interfaces %v, want only lo", got.Net)
	}
	if got.Hostname != "sandbox" {
		t.Errorf("hostname %q", got.Hostname)
	}
	if len(got.Core) != 2 || got.Core[0] != 0 || got.Core[1] != 0 || len(got.NoFile) != 2 || got.NoFile[1] != 1024 {
		t.Errorf("rlimits core %v nofile %v, want core 0 and nofile 1024", got.Core, got.NoFile)
	}
	t.Logf("seccomp mode %s", got.Seccomp)
}

func testEgressBlocked(t *testing.T, s *suite) {
	outside := testutil.NewHost(t)
	lis := outside.Listen(t, 0)
	var accepts atomic.Int32
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			accepts.Add(1)
			c.Close()
		}
	}()
	// The outside host answers the host itself, so it is reachable: a
	// connection refused from the sandbox proves isolation, not a dead host.
	if c, err := net.DialTimeout("tcp", lis.Addr().String(), 3*time.Second); err != nil {
		t.Fatalf("the outside host does not answer the host: %v", err)
	} else {
		c.Close()
	}
	svc := s.service(t, nil)
	obs := &observer{}
	host, port, _ := net.SplitHostPort(lis.Addr().String())
	code := fmt.Sprintf(`import socket
s = socket.socket()
s.settimeout(3)
try:
    s.connect((%q, %s))
    print('connected')
except OSError as e:
    print('blocked', e.errno)
`, host, port)
	res := s.run(t, svc, python(code, limits.Limits{}), obs)
	defer s.noContainerOfRun(t, res.RunID)
	got := string(obs.output(task.Stdout))
	if !strings.HasPrefix(got, "blocked") {
		t.Fatalf("the sandbox reached the outside host: %q", got)
	}
	if n := accepts.Load(); n > 1 {
		t.Fatalf("the outside host accepted %d connections; only the host's check was expected", n)
	}
}

func testStdinInputsMounts(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	obs := &observer{}
	code := `import os, sys
print(sys.stdin.read().upper(), end='')
print(open('/input/dir/data.txt').read(), end='')
print(open('/mnt/data/dataset.txt').read(), end='')
try:
    open('/mnt/data/evil', 'w')
    print('mount writable')
except OSError as e:
    print('mount', e.strerror)
print(os.getcwd())
open('note.txt', 'w').write('x')
`
	req := python(code, limits.Limits{})
	req.Options.Stdin = []byte("from stdin\n")
	req.Options.Files = []task.File{{Path: "dir/data.txt", Content: []byte("from input\n")}}
	req.Options.Mounts = []string{"data"}
	req.Options.Workdir = "out"
	res := s.run(t, svc, req, obs)
	defer s.noContainerOfRun(t, res.RunID)
	refusal := "Read-only file system"
	if s.gvisor() {
		refusal = "Permission denied"
	}
	want := "FROM STDIN\nfrom input\noperator data\nmount " + refusal + "\n/workspace/out\n"
	if got := string(obs.output(task.Stdout)); got != want {
		t.Fatalf("stdout = %q (stderr %q), want %q", got, obs.output(task.Stderr), want)
	}
}

func testMissingCommand(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	obs := &observer{}
	res := s.run(t, svc, task.Request{Command: &task.Command{Argv: []string{"no-such-command"}}}, obs)
	defer s.noContainerOfRun(t, res.RunID)
	if res.Status != task.StatusNonzeroExit || res.ExitCode != 127 {
		t.Fatalf("status = %s exit %d (%s), want NONZERO_EXIT 127", res.Status, res.ExitCode, res.Message)
	}
	if !bytes.Contains(obs.output(task.Stderr), []byte("no-such-command")) {
		t.Fatalf("stderr %q does not name the missing command", obs.output(task.Stderr))
	}
}

func testCancel(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var cancelledAt time.Time
	obs := &observer{}
	obs.onOutput = func(_ task.Stream, p []byte) {
		if bytes.Contains(p, []byte("running")) && cancelledAt.IsZero() {
			cancelledAt = time.Now()
			cancel()
		}
	}
	res, err := svc.Run(ctx, python("import time\nprint('running')\ntime.sleep(60)", limits.Limits{}), obs)
	returned := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	defer s.noContainerOfRun(t, res.RunID)
	if res.Status != task.StatusCancelled {
		t.Fatalf("status = %s, want CANCELLED", res.Status)
	}
	// Run returns once the container is dead, waited for and removed.
	if took := returned.Sub(cancelledAt); took > time.Second {
		t.Fatalf("the container was gone %v after the cancel, want within 1 s", took)
	}
}

func testTenAtOnce(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			obs := &observer{}
			code := fmt.Sprintf("for _ in range(100): print('task-%d')", i)
			res, err := svc.Run(context.Background(), python(code, limits.Limits{}), obs)
			if err != nil {
				errs <- err
				return
			}
			defer s.noContainerOfRun(t, res.RunID)
			want := strings.Repeat(fmt.Sprintf("task-%d\n", i), 100)
			if res.Status != task.StatusOK || string(obs.output(task.Stdout)) != want {
				errs <- fmt.Errorf("task %d: %s, %d bytes of output, want its own %d", i, res.Status, len(obs.output(task.Stdout)), len(want))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// testLargeWritesArriveWhole writes big chunks through print and through
// the binary buffer: every byte must arrive, whatever the kernel does with
// pipe writes.
func testLargeWritesArriveWhole(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	code := `import sys
print('x' * 3000000)
for _ in range(4):
    sys.stdout.buffer.write(b'y' * (1 << 20))
sys.stdout.flush()
print('z' * 1000000, file=sys.stderr)
`
	obs := &observer{}
	res := s.run(t, svc, python(code, limits.Limits{StdoutBytes: 16 << 20, StderrBytes: 16 << 20}), obs)
	defer s.noContainerOfRun(t, res.RunID)
	wantOut := int64(3000001 + 4<<20)
	if res.StdoutTotal != wantOut || res.StderrTotal != 1000001 || int64(len(obs.output(task.Stdout))) != wantOut {
		t.Fatalf("stdout %d (delivered %d), stderr %d; want %d and 1000001", res.StdoutTotal, len(obs.output(task.Stdout)), res.StderrTotal, wantOut)
	}
}

// testLoopbackWorks serves and connects on 127.0.0.1 inside the sandbox:
// no network must not mean no loopback, which test suites rely on.
func testLoopbackWorks(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	code := `import socket, threading
srv = socket.socket()
srv.bind(('127.0.0.1', 0))
srv.listen()
def serve():
    c, _ = srv.accept()
    c.sendall(b'pong')
    c.close()
threading.Thread(target=serve).start()
c = socket.create_connection(srv.getsockname(), timeout=5)
print(c.recv(4).decode())
`
	obs := &observer{}
	res := s.run(t, svc, python(code, limits.Limits{}), obs)
	defer s.noContainerOfRun(t, res.RunID)
	if got := string(obs.output(task.Stdout)); got != "pong\n" {
		t.Fatalf("stdout %q (stderr %q), want pong over loopback", got, obs.output(task.Stderr))
	}
}

// testKernelIdentity proves which kernel the program talks to: gVisor's
// when runsc was asked for, the host's when runc was.
func testKernelIdentity(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	obs := &observer{}
	res := s.run(t, svc, task.Request{Command: &task.Command{Shell: "cat /proc/version; dmesg 2>&1 | head -n 3"}}, obs)
	defer s.noContainerOfRun(t, res.RunID)
	host, err := os.ReadFile("/proc/version")
	if err != nil {
		t.Fatal(err)
	}
	got := string(obs.output(task.Stdout))
	if obs.started == nil || obs.started.Runtime != s.target.OCIRuntime || obs.started.RuntimeVersion == "" {
		t.Errorf("started = %+v, want the runtime asked for and its version", obs.started)
	}
	if s.gvisor() {
		if !strings.Contains(got, "gVisor") || strings.Contains(got, string(host)) {
			t.Fatalf("asked for runsc, the program sees %q", got)
		}
		return
	}
	if !strings.HasPrefix(got, string(host)) {
		t.Fatalf("asked for runc, the program sees %q, not the host's %q", got, host)
	}
}

// testCancelledStart cancels starts, and prepares for the pool, at every
// moment of their course, 20 ms apart, until one is quick enough to finish:
// whatever a cancelled one made by then must be gone, in the engine and
// on the host.
func testCancelledStart(t *testing.T, s *suite) {
	ctx := context.Background()
	img, err := s.target.Runtime.Image(ctx, "sandboxd/shell")
	if err != nil {
		testutil.SkipOrFail(t, "no shell image: %v (make images builds it)", err)
	}
	preparer, canPrepare := s.target.Runtime.(runtime.Preparer)
	instance := fmt.Sprintf("cancel-%d", time.Now().UnixNano()%1e9)
	labels := map[string]string{task.LabelInstance: instance}
	t.Cleanup(func() {
		if _, err := s.target.Runtime.Reap(ctx, labels); err != nil {
			t.Errorf("reap: %v", err)
		}
	})
	start := func(ctx context.Context, spec runtime.Spec) (runtime.Container, error) {
		return s.target.Runtime.Start(ctx, spec)
	}
	prepare := func(ctx context.Context, spec runtime.Spec) (runtime.Container, error) {
		return preparer.Prepare(ctx, spec)
	}
	for _, mode := range []struct {
		name string
		fn   func(context.Context, runtime.Spec) (runtime.Container, error)
	}{{"start", start}, {"prepare", prepare}} {
		if mode.name == "prepare" && !canPrepare {
			continue
		}
		cancelled := 0
		for after := time.Duration(0); ; after += 20 * time.Millisecond {
			if after > 10*time.Second {
				t.Fatalf("%s never finished within 10 s", mode.name)
			}
			spec := runtime.Spec{
				ID:         fmt.Sprintf("%s-%s-%d", instance, mode.name, after.Milliseconds()),
				Image:      img.ID,
				Runtime:    s.target.OCIRuntime,
				Argv:       []string{"true"},
				WorkingDir: "/",
				User:       "65534:65534",
				Labels:     labels,
				Resources:  runtime.Resources{MemoryBytes: 64 << 20, CPUMillis: 500, Pids: 16, NoFile: 64},
				Stdout:     io.Discard,
				Stderr:     io.Discard,
			}
			startCtx, cancel := context.WithTimeout(ctx, after)
			c, err := mode.fn(startCtx, spec)
			cancel()
			if err == nil {
				if err := c.Remove(ctx); err != nil {
					t.Fatalf("remove: %v", err)
				}
				s.assertNothingLeft(t, labels, "")
				break
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s cut short after %v: %v, want the deadline's error", mode.name, after, err)
			}
			cancelled++
			s.assertNothingLeft(t, labels, "")
			if t.Failed() {
				t.Fatalf("%s cut short after %v left the above behind", mode.name, after)
			}
		}
		t.Logf("%s: %d cancelled at 20 ms steps, nothing left behind", mode.name, cancelled)
	}
}

// testPooledNeverReused runs many tasks through the pool; each must find a
// fresh /workspace, /tmp and process table, and leaves marks in them that
// the next one would see if a container were reused.
func testPooledNeverReused(t *testing.T, s *suite) {
	n := 500
	if s.gvisor() {
		n = 100
	}
	svc := s.service(t, func(c *task.Config) { c.PoolSize = 4 })
	code := `import os
procs = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
print(os.listdir('/workspace'), os.listdir('/tmp'), procs == [1, os.getpid()], os.path.exists('/input/mark'))
open('/workspace/mark', 'w').write('x')
open('/tmp/mark', 'w').write('x')
`
	warm := 0
	for i := range n {
		obs := &observer{}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res, err := svc.Run(ctx, python(code, limits.Limits{}), obs)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if got := string(obs.output(task.Stdout)); res.Status != task.StatusOK || got != "[] [] True False\n" {
			t.Fatalf("task %d (%s): %s %q %q", i, res.Start, res.Status, got, obs.output(task.Stderr))
		}
		if res.Start == task.StartWarm {
			warm++
		}
	}
	if warm < n/4 {
		t.Fatalf("only %d of %d tasks were warm: the test proves little", warm, n)
	}
	t.Logf("%d tasks, %d warm, each in a fresh container", n, warm)
}

// testShutdownWhileFilling shuts services down while their pools are
// making containers, at moments 10 ms apart: each service's cleanup checks
// that no container, shim or task folder is left, including those whose
// creation the shutdown caught halfway (the engine finishes a create whose
// caller has gone).
func testShutdownWhileFilling(t *testing.T, s *suite) {
	for delay := time.Duration(0); delay <= 250*time.Millisecond; delay += 10 * time.Millisecond {
		t.Run(delay.String(), func(t *testing.T) {
			svc := s.service(t, func(c *task.Config) { c.PoolSize = 2 })
			time.Sleep(delay)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := svc.Shutdown(ctx); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
		})
	}
}

// readBundle verifies a run's stored bundle and returns it with its entries.
func readBundle(t *testing.T, svc *task.Service, res task.Result) (*artifacts.Bundle, map[string][]byte) {
	t.Helper()
	if res.BundleDigest == "" {
		t.Fatalf("the run left no bundle: %s", res.BundleError)
	}
	f, err := svc.OpenBundle(context.Background(), res.BundleDigest)
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

// testBundleOfHostileWorkspace runs a program that leaves a link to a host
// secret, a FIFO, and a tree of 10,000 files: the bundle holds the program's
// own files only, within the limits, and collecting it does not hang.
func testBundleOfHostileWorkspace(t *testing.T, s *suite) {
	svc := s.service(t, func(c *task.Config) {
		c.Output = task.OutputLimits{Files: 100, Bytes: 1 << 20, Entries: 2000, Depth: 8}
	})
	code := `import os
open('result.txt', 'w').write('the answer is 42\n')
os.symlink('/etc/shadow', 'out')
os.symlink('/etc', 'etc')
os.mkfifo('pipe')
for d in range(100):
    os.makedirs(f'tree/d{d:03}')
    for f in range(100):
        open(f'tree/d{d:03}/f{f:03}', 'w').write('x')
print('left', len(os.listdir('tree')), 'folders')
`
	start := time.Now()
	res := s.run(t, svc, python(code, limits.Limits{Timeout: 60 * time.Second}), nil)
	defer s.noContainerOfRun(t, res.RunID)
	if res.Status != task.StatusOK {
		t.Fatalf("status = %s (%s)", res.Status, res.Message)
	}
	b, entries := readBundle(t, svc, res)
	t.Logf("run and bundle took %v", time.Since(start).Round(time.Millisecond))
	if string(entries["output/result.txt"]) != "the answer is 42\n" {
		t.Errorf("output/result.txt = %q", entries["output/result.txt"])
	}
	for p, content := range entries {
		if bytes.Contains(content, []byte("root:")) {
			t.Fatalf("entry %s holds a host file", p)
		}
	}
	types := map[string]string{}
	stored := 0
	for _, o := range b.Manifest.Reproducible.Outputs {
		types[o.Path] = o.Type
		if o.SHA256 != "" {
			stored++
		}
	}
	wantPipe := "fifo"
	if s.gvisor() {
		wantPipe = "" // the FIFO stays inside gVisor
	}
	if types["out"] != "symlink" || types["etc"] != "symlink" || types["pipe"] != wantPipe {
		t.Errorf("out %q etc %q pipe %q, want symlink, symlink, %q", types["out"], types["etc"], types["pipe"], wantPipe)
	}
	if len(b.Manifest.Reproducible.Outputs) != 2000 || !b.Manifest.Reproducible.OutputsTruncated || stored != 100 {
		t.Errorf("%d listed (truncated %v), %d stored; want 2000 listed and truncated, 100 stored",
			len(b.Manifest.Reproducible.Outputs), b.Manifest.Reproducible.OutputsTruncated, stored)
	}
}

func testSameProgramTwice(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	code := `import json, time
print(json.dumps({'hash': hash('seed'), 'tz': time.tzname, 'sum': sum(range(1000))}))
open('out.json', 'w').write(str(hash('x')))
`
	var results []task.Result
	for range 2 {
		res := s.run(t, svc, python(code, limits.Limits{}), nil)
		s.noContainerOfRun(t, res.RunID)
		results = append(results, res)
	}
	if results[0].BundleDigest == results[1].BundleDigest {
		t.Fatal("two runs share a bundle digest")
	}
	if results[0].ReproducibleDigest != results[1].ReproducibleDigest {
		a, _ := readBundle(t, svc, results[0])
		b, _ := readBundle(t, svc, results[1])
		t.Fatalf("the reproducible parts differ:\n%+v\n%+v", a.Manifest.Reproducible, b.Manifest.Reproducible)
	}
}

// testInitIsClosed tries every way a program under the init's user could
// learn the token of the exit report (see runtime/launch): the init's
// memory, environment, the stdin it read the token from, or tracing it.
// All must be closed. (gVisor lets the program list the init's file
// descriptor numbers, which tell nothing.)
func testInitIsClosed(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	code := `import ctypes, os
def attempt(name, fn):
    try:
        fn()
        print(name, "open")
    except OSError as e:
        print(name, "closed", e.errno)
attempt("mem", lambda: os.pread(os.open("/proc/1/mem", os.O_RDONLY), 16, 0x400000))
attempt("environ", lambda: open("/proc/1/environ", "rb").read())
attempt("stdin", lambda: os.open("/proc/1/fd/0", os.O_RDONLY))
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH = 16
def ptrace():
    if libc.ptrace(PTRACE_ATTACH, 1, None, None) != 0:
        raise OSError(ctypes.get_errno(), "ptrace")
attempt("ptrace", ptrace)
`
	obs := &observer{}
	res := s.run(t, svc, python(code, limits.Limits{}), obs)
	defer s.noContainerOfRun(t, res.RunID)
	out := string(obs.output(task.Stdout))
	if res.Status != task.StatusOK {
		t.Fatalf("status = %s (%s), stdout %q, stderr %q", res.Status, res.Message, out, obs.output(task.Stderr))
	}
	for _, what := range []string{"mem", "environ", "stdin", "ptrace"} {
		if !strings.Contains(out, what+" closed") {
			t.Errorf("the program could reach the init's %s:\n%s", what, out)
		}
	}
}

// testEndKillsLeftovers ends a program that leaves a process behind and
// writes a file as its last act: the result comes without waiting for the
// leftover, has the program's code, and has the file whole (under gVisor,
// written through the sandbox's cache).
func testEndKillsLeftovers(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	code := `import os, subprocess, sys
subprocess.Popen(["sleep", "60"], start_new_session=True)
print("bye", flush=True)
with open("last.bin", "wb") as f:
    f.write(bytes(range(256)) * 4096)
os._exit(7)
`
	obs := &observer{}
	res := s.run(t, svc, python(code, limits.Limits{Timeout: 30 * time.Second}), obs)
	defer s.noContainerOfRun(t, res.RunID)
	if res.Status != task.StatusNonzeroExit || res.ExitCode != 7 {
		t.Fatalf("status = %s, code %d (%s), want NONZERO_EXIT 7", res.Status, res.ExitCode, res.Message)
	}
	if got := string(obs.output(task.Stdout)); got != "bye\n" {
		t.Errorf("stdout = %q", got)
	}
	if res.Duration > 20*time.Second {
		t.Errorf("the run lasted %v: it waited for the process left behind", res.Duration)
	}
	var block [256]byte
	for i := range block {
		block[i] = byte(i)
	}
	sum := sha256.Sum256(bytes.Repeat(block[:], 4096))
	for _, f := range res.Files {
		if f.Path == "last.bin" {
			if f.Size != 1<<20 || f.SHA256 != hex.EncodeToString(sum[:]) {
				t.Fatalf("last.bin is %d bytes, sha256 %s: not what the program wrote", f.Size, f.SHA256)
			}
			return
		}
	}
	t.Fatalf("last.bin is not among the outputs %+v", res.Files)
}

// testChildOOMKill has a child of the program killed for lack of memory
// while the program itself goes on and exits: the result says so, as the
// engine tells it, even though the init's report only has the exit code.
func testChildOOMKill(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	code := `import subprocess, sys
r = subprocess.run([sys.executable, "-c", "b = []\nwhile True: b.append(bytearray(8 << 20))"])
print("child", r.returncode, flush=True)
sys.exit(3)
`
	obs := &observer{}
	res := s.run(t, svc, python(code, limits.Limits{MemoryBytes: 128 << 20, Timeout: 60 * time.Second}), obs)
	defer s.noContainerOfRun(t, res.RunID)
	if res.Status != task.StatusOOMKilled {
		t.Fatalf("status = %s (%s), stdout %q, want OOM_KILLED", res.Status, res.Message, obs.output(task.Stdout))
	}
}

// testNothingGrowsPerTask runs tasks in a row and checks that the daemon's
// goroutines (and what they hold) come back to where they were once each
// task's cleanup is done: a backend that left one behind per task would
// grow without bound.
func testNothingGrowsPerTask(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	settled := func() int {
		if s.warm {
			if err := svc.PoolReady(ctx); err != nil {
				t.Fatalf("the pool did not fill: %v", err)
			}
		}
		time.Sleep(200 * time.Millisecond)
		return goruntime.NumGoroutine()
	}
	res := s.run(t, svc, task.Request{Command: &task.Command{Shell: "echo warm-up"}}, nil)
	s.noContainerOfRun(t, res.RunID)
	before := settled()
	const tasks, slack = 30, 10
	for range tasks {
		res := s.run(t, svc, task.Request{Command: &task.Command{Shell: "echo hi; echo there >&2"}}, nil)
		s.noContainerOfRun(t, res.RunID)
	}
	after := settled()
	for deadline := time.Now().Add(10 * time.Second); after > before+slack && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		after = goruntime.NumGoroutine()
	}
	if after > before+slack {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines before %d tasks, %d after; they are:\n%s", before, tasks, after, buf[:goruntime.Stack(buf, true)])
	}
}
