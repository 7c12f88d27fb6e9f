//go:build integration

package direct_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/internal/testutil/backends"
	"github.com/sandboxd/sandboxd/runtime"
)

// pandasHolder loads pandas and numpy, holds ~128 MiB of numbers, and
// answers each line on its stdin with their sum: a Python session's
// state as an agent leaves it after its installs and loads.
const pandasHolder = `import sys, numpy, pandas
frame = pandas.DataFrame({"x": numpy.arange(16 << 20, dtype="float64")})
print("ready", flush=True)
for line in sys.stdin:
    print(int(frame.x.sum()), flush=True)
`

// BenchmarkSessionCheckpoint times, under gVisor on the direct backend, the
// pause of a session holding pandas and ~128 MiB (a checkpoint that ends
// its container), its resume (a restore, until its process answers with
// its variables intact), and a fork into 4 (a checkpoint left running,
// then 4 restores at once, until each answers): issue 59's targets are
// <= 1 s, <= 500 ms and <= 2 s. It reports the medians of its rounds and
// the checkpoint's size.
func BenchmarkSessionCheckpoint(b *testing.B) {
	e := backends.Direct(b)
	ctx := context.Background()
	img, err := e.Runtime.Image(ctx, "sandboxd/python")
	if err != nil {
		testutil.SkipOrFail(b, "no sandboxd/python: %v", err)
	}
	host, ok := e.Runtime.(runtime.Preparer)
	restorer, rok := e.Runtime.(runtime.Restorer)
	if !ok || !rok {
		b.Fatal("the direct backend cannot prepare or restore")
	}
	labels := map[string]string{"io.sandboxd.direct-bench.checkpoint": fmt.Sprint(os.Getpid())}
	b.Cleanup(func() { e.Runtime.Reap(ctx, labels) })
	resources := runtime.Resources{MemoryBytes: 1 << 30, CPUMillis: 2000, Pids: 64, NoFile: 256}
	n := 0
	spec := func() runtime.Spec {
		n++
		return runtime.Spec{ID: fmt.Sprintf("bench-cp-%d-%d", os.Getpid(), n), Image: img.ID, Runtime: runtime.RunscName,
			WorkingDir: "/tmp", User: "65534:65534", Labels: labels, Resources: resources,
			Tmpfs: []runtime.Tmpfs{{Target: "/tmp", SizeBytes: 64 << 20}}}
	}
	// answer asks the holder for its sum and waits for it.
	answer := func(p runtime.Process, out *testutil.Buffer) error {
		before := strings.Count(out.String(), "\n")
		if err := p.WriteStdin([]byte("sum\n")); err != nil {
			return err
		}
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if text := out.String(); strings.Count(text, "\n") > before {
				lines := strings.Split(strings.TrimSpace(text), "\n")
				if got, want := lines[len(lines)-1], fmt.Sprint((16<<20)*((16<<20)-1)/2); got != want {
					return fmt.Errorf("the holder's sum is %s, want %s", got, want)
				}
				return nil
			}
		}
		return fmt.Errorf("the holder did not answer: %q", out.String())
	}
	// restored is when Restore returned, the restore whole (its init
	// writes again): the rest of resume is the holder's sum over its
	// frame.
	var pause, restored, resume, fork []time.Duration
	var size int64
	for range max(b.N, 3) {
		prepared, err := host.Prepare(ctx, spec())
		if err != nil {
			b.Fatal(err)
		}
		sess, err := prepared.(runtime.SessionHost).OpenSession(ctx, resources)
		if err != nil {
			b.Fatal(err)
		}
		var out testutil.Buffer
		holder, err := sess.(runtime.ProcessHost).Spawn(ctx, runtime.ProcessSpec{Argv: []string{"python3", "-c", pandasHolder},
			Env: []string{"PATH=/usr/bin:/bin"}, WorkingDir: "/tmp", Stdout: &out, Stderr: &out})
		if err != nil {
			b.Fatal(err)
		}
		for deadline := time.Now().Add(2 * time.Minute); !strings.Contains(out.String(), "ready"); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatalf("the holder did not load: %q", out.String())
			}
		}
		forkDir, pauseDir := b.TempDir(), b.TempDir()

		start := time.Now()
		saved, err := sess.(runtime.Checkpointer).Checkpoint(ctx, forkDir, true)
		if err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 4)
		forks := make([]runtime.Restored, 4)
		for i := range forks {
			s := spec()
			wg.Go(func() {
				var out testutil.Buffer
				forks[i], errs[i] = restorer.Restore(ctx, s, forkDir, map[uint32]runtime.ProcessSpec{saved[0].ID: {Stdout: &out, Stderr: io.Discard}})
				if errs[i] == nil {
					errs[i] = answer(forks[i].Processes[saved[0].ID], &out)
				}
			})
		}
		wg.Wait()
		fork = append(fork, time.Since(start))
		for i, f := range forks {
			if f.Container != nil {
				f.Container.Remove(ctx)
			}
			if errs[i] != nil {
				b.Fatal(errs[i])
			}
		}
		if err := answer(holder, &out); err != nil {
			b.Fatalf("the fork's source: %v", err)
		}

		start = time.Now()
		if _, err := sess.(runtime.Checkpointer).Checkpoint(ctx, pauseDir, false); err != nil {
			b.Fatal(err)
		}
		pause = append(pause, time.Since(start))
		prepared.Remove(ctx)
		size = dirSize(b, pauseDir)

		start = time.Now()
		var resumedOut testutil.Buffer
		r, err := restorer.Restore(ctx, spec(), pauseDir, map[uint32]runtime.ProcessSpec{saved[0].ID: {Stdout: &resumedOut, Stderr: io.Discard}})
		restored = append(restored, time.Since(start))
		if err == nil {
			err = answer(r.Processes[saved[0].ID], &resumedOut)
		}
		resume = append(resume, time.Since(start))
		if r.Container != nil {
			r.Container.Remove(ctx)
		}
		if err != nil {
			b.Fatal(err)
		}
		os.RemoveAll(forkDir)
		os.RemoveAll(pauseDir)
	}
	b.ReportMetric(median(pause), "pause-ms")
	b.ReportMetric(median(resume), "resume-ms")
	b.ReportMetric(median(restored), "restored-ms")
	b.ReportMetric(median(fork), "fork4-ms")
	b.ReportMetric(float64(size)/(1<<20), "checkpoint-MiB")
	b.ReportMetric(0, "ns/op")
}

func median(d []time.Duration) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[len(s)/2]) / float64(time.Millisecond)
}

func dirSize(b *testing.B, dir string) int64 {
	var total int64
	filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			total += info.Size()
		}
		return nil
	})
	return total
}
