//go:build integration

package conformance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/run"
)

func testMissingCommand(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	obs := &observer{}
	res := s.run(t, svc, run.Request{Command: &run.Command{Argv: []string{"no-such-command"}}}, obs)
	defer s.noContainerOfRun(t, res.RunID)
	if res.Status != run.StatusNonzeroExit || res.ExitCode != 127 {
		t.Fatalf("status = %s exit %d (%s), want NONZERO_EXIT 127", res.Status, res.ExitCode, res.Message)
	}
	if !bytes.Contains(obs.output(run.Stderr), []byte("no-such-command")) {
		t.Fatalf("stderr %q does not name the missing command", obs.output(run.Stderr))
	}
}

func testCancel(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var cancelledAt time.Time
	obs := &observer{}
	obs.onOutput = func(_ run.Stream, p []byte) {
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
	if res.Status != run.StatusCancelled {
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
			if res.Status != run.StatusOK || string(obs.output(run.Stdout)) != want {
				errs <- fmt.Errorf("task %d: %s, %d bytes of output, want its own %d", i, res.Status, len(obs.output(run.Stdout)), len(want))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
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
	if res.Status != run.StatusNonzeroExit || res.ExitCode != 7 {
		t.Fatalf("status = %s, code %d (%s), want NONZERO_EXIT 7", res.Status, res.ExitCode, res.Message)
	}
	if got := string(obs.output(run.Stdout)); got != "bye\n" {
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

// testCancelledStart cancels starts, and prepares for the pool, at moments
// spread over their course, until one is quick enough to finish: whatever
// a cancelled one made by then must be gone, in the engine and on the
// host. The cuts are spread over the time an uncut start takes, about
// cuts of them and at least 20 ms apart, each at a random point of its
// step so that runs together cut everywhere: gVisor's starts, 30 steps of
// 20 ms long, are cut as often as runc's.
func testCancelledStart(t *testing.T, s *suite) {
	const cuts = 10
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
		newSpec := func(id string) runtime.Spec {
			return runtime.Spec{
				ID:         fmt.Sprintf("%s-%s-%s", instance, mode.name, id),
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
		}
		// The faster of two: the first may fill the engine's caches.
		took := time.Hour
		for _, id := range []string{"uncut", "uncut-again"} {
			began := time.Now()
			c, err := mode.fn(ctx, newSpec(id))
			if err != nil {
				t.Fatalf("%s: %v", mode.name, err)
			}
			took = min(took, time.Since(began))
			if err := c.Remove(ctx); err != nil {
				t.Fatalf("remove: %v", err)
			}
		}
		s.assertNothingLeft(t, labels, "")
		step := max(20*time.Millisecond, took/cuts)
		cancelled := 0
		for i := 0; ; i++ {
			after := cutAt(i, step)
			if after > 10*time.Second {
				t.Fatalf("%s never finished within 10 s", mode.name)
			}
			startCtx, cancel := context.WithTimeout(ctx, after)
			c, err := mode.fn(startCtx, newSpec(strconv.Itoa(i)))
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
		t.Logf("%s: %d cancelled at %v steps (an uncut one took %v), nothing left behind", mode.name, cancelled, step.Round(time.Millisecond), took.Round(time.Millisecond))
	}
}

// cutAt is the i-th of cuts step apart: the first at once, each other at
// a random point of its step, so that runs together cut everywhere.
func cutAt(i int, step time.Duration) time.Duration {
	if i == 0 {
		return 0
	}
	return time.Duration(i)*step - rand.N(step)
}

// testPooledNeverReused runs many tasks through the pool; each must find a
// fresh /workspace, /tmp and process table, and leaves marks in them that
// the next one would see if a container were reused.
func testPooledNeverReused(t *testing.T, s *suite) {
	n := testutil.Soak(t, 500, 40)
	if s.gvisor() {
		n = testutil.Soak(t, 100, 20)
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
		if got := string(obs.output(run.Stdout)); res.Status != run.StatusOK || got != "[] [] True False\n" {
			t.Fatalf("task %d (%s): %s %q %q", i, res.Start, res.Status, got, obs.output(run.Stderr))
		}
		if res.Start == run.StartWarm {
			warm++
		}
	}
	if warm < n/4 {
		t.Fatalf("only %d of %d tasks were warm: the test proves little", warm, n)
	}
	t.Logf("%d tasks, %d warm, each in a fresh container", n, warm)
}

// testShutdownWhileFilling shuts services down while their pools are
// making containers, at moments spread over the time a pool takes to fill
// (as testCancelledStart cuts starts): each service's cleanup checks that
// no container, shim or task folder is left, including those whose
// creation the shutdown caught halfway (the engine finishes a create whose
// caller has gone).
func testShutdownWhileFilling(t *testing.T, s *suite) {
	const cuts = 8
	began := time.Now()
	svc := s.service(t, func(c *task.Config) { c.PoolSize = 2 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := svc.PoolReady(ctx); err != nil {
		t.Fatalf("the pool did not fill: %v", err)
	}
	took := time.Since(began)
	step := max(10*time.Millisecond, took/cuts)
	t.Logf("shutdowns at %v steps (a pool filled in %v)", step.Round(time.Millisecond), took.Round(time.Millisecond))
	for i := 0; i <= cuts+1; i++ {
		delay := cutAt(i, step)
		t.Run(delay.Round(time.Millisecond).String(), func(t *testing.T) {
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
	res := s.run(t, svc, run.Request{Command: &run.Command{Shell: "echo warm-up"}}, nil)
	s.noContainerOfRun(t, res.RunID)
	before := settled()
	const tasks, slack = 30, 10
	for range tasks {
		res := s.run(t, svc, run.Request{Command: &run.Command{Shell: "echo hi; echo there >&2"}}, nil)
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
