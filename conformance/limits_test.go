//go:build integration

package conformance

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/sandbox/launch"
	"github.com/sandboxd/sandboxd/internal/sandbox/lifecycle"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/task/run"
)

func testMemoryBomb(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	code := "blocks = []\nwhile True:\n    blocks.append(bytearray(8 << 20))\n"
	res := s.run(t, svc, python(code, limits.Limits{MemoryBytes: 128 << 20, Timeout: 60 * time.Second}), nil)
	defer s.noContainerOfRun(t, res.RunID)
	if res.Status != run.StatusOOMKilled {
		t.Fatalf("status = %s (%s), want OOM_KILLED", res.Status, res.Message)
	}
	if res.PeakMemoryBytes > 0 && res.PeakMemoryBytes > 130<<20 {
		t.Errorf("peak memory %d is above the 128 MiB limit", res.PeakMemoryBytes)
	}
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
	start := time.Now()
	res := s.run(t, svc, python(code, limits.Limits{MemoryBytes: 128 << 20, Timeout: 60 * time.Second}), obs)
	took := time.Since(start)
	defer s.noContainerOfRun(t, res.RunID)
	if res.Status != run.StatusOOMKilled {
		t.Fatalf("status = %s (%s), stdout %q, want OOM_KILLED", res.Status, res.Message, obs.output(run.Stdout))
	}
	// Only the engine can tell, so the init that held the container after
	// its report was let go; had it not been, it would have held to its
	// bound.
	if took >= launch.HoldBound {
		t.Errorf("the run took %v, the init's whole hold (%v): it was not let go", took, launch.HoldBound)
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
	if _, err := fmt.Sscan(string(obs.output(run.Stdout)), &n, &errno); err != nil {
		t.Fatalf("stdout %q: %v", obs.output(run.Stdout), err)
	}
	// The limit leaves room for the init's threads (lifecycle.PidsLimits):
	// the program gets at least its 32, and not much more.
	if n < 32-1 || n >= 32+lifecycle.InitThreads || errno != 11 {
		t.Errorf("made %d processes (errno %d), want about the limit of 32, then EAGAIN", n, errno)
	}

	// The classic bomb ends with a status, and the daemon keeps serving.
	bomb := run.Request{Command: &run.Command{Shell: "b() { b | b & }; b"},
		Options: run.Options{Limits: limits.Limits{Pids: 64, Timeout: 3 * time.Second}}}
	res = s.run(t, svc, bomb, nil)
	s.noContainerOfRun(t, res.RunID)
	if res.Status == "" {
		t.Fatal("the fork bomb ended without a status")
	}
	after := &observer{}
	res = s.run(t, svc, python("print('still serving')", limits.Limits{}), after)
	defer s.noContainerOfRun(t, res.RunID)
	if res.Status != run.StatusOK || string(after.output(run.Stdout)) != "still serving\n" {
		t.Fatalf("after the bomb: %s %q", res.Status, after.output(run.Stdout))
	}
}

func testTimeout(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	obs := &observer{}
	res := s.run(t, svc, python("while True: pass", limits.Limits{Timeout: 2 * time.Second}), obs)
	ended := time.Now()
	defer s.noContainerOfRun(t, res.RunID)
	if res.Status != run.StatusTimeout {
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
	obs.onOutput = func(_ run.Stream, p []byte) {
		if bytes.Contains(p, []byte("ready")) {
			time.Sleep(200 * time.Millisecond)
			select {
			case seen <- processWithArg(marker):
			default:
			}
		}
	}
	req := run.Request{Program: &run.Program{Language: "bash", Code: script},
		Options: run.Options{Limits: limits.Limits{Timeout: 2 * time.Second}}}
	res := s.run(t, svc, req, obs)
	defer s.noContainerOfRun(t, res.RunID)
	if res.Status != run.StatusTimeout {
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
for i in range(6_000_000):
    n += i
print(time.monotonic() - start)
`
	// Interleaved rounds, each arm judged by its fastest: a busy machine only
	// ever slows a run, and it slows the whole core more than the quarter
	// (which uses a quarter of one), so medians shrank the ratio under load.
	// Five rounds: with three, CI's lanes side by side on 2 cores once left
	// the whole core no unhurried run (2.41x, its fastest 0.46 s against
	// 0.29-0.34 s on other pairs of the same CI).
	took := map[int64][]float64{}
	for range 5 {
		for _, millis := range []int64{1000, 250} {
			obs := &observer{}
			res := s.run(t, svc, python(code, limits.Limits{CPUMillis: millis, Timeout: time.Minute}), obs)
			s.noContainerOfRun(t, res.RunID)
			var secs float64
			if _, err := fmt.Sscan(string(obs.output(run.Stdout)), &secs); err != nil {
				t.Fatalf("stdout %q: %v", obs.output(run.Stdout), err)
			}
			took[millis] = append(took[millis], secs)
		}
	}
	slower := slices.Min(took[250]) / slices.Min(took[1000])
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
	if got := string(obs.output(run.Stdout)); got != want {
		t.Fatalf("stdout = %q, want %q", got, want)
	}
}
