package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task/taskdir"
)

// manualClock is a clock that moves only when the test moves it.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func idle(ctx context.Context, spec runtime.Spec) runtime.Exit {
	<-ctx.Done()
	return runtime.Exit{Code: 137}
}

// prepareOn makes pooled containers on a fake runtime, each with a task
// folder below root.
func prepareOn(rt *fake.Runtime, root string) func(context.Context, Key, string) (*Warm, error) {
	var n int
	var mu sync.Mutex
	return func(ctx context.Context, key Key, name string) (*Warm, error) {
		mu.Lock()
		n++
		id := fmt.Sprintf("warm-%d", n)
		mu.Unlock()
		dir, err := taskdir.Create(taskdir.FolderDisk{}, root, id, uint32(os.Getuid()), taskdir.Sizes{Disk: 1 << 20})
		if err != nil {
			return nil, err
		}
		ctr, err := rt.Prepare(ctx, runtime.Spec{ID: id, Image: key.Image, Runtime: key.Runtime, User: "1000:1000", WorkingDir: "/workspace",
			Resources: runtime.Resources{MemoryBytes: 64 << 20, CPUMillis: 1000, Pids: 64, NoFile: 1024}})
		if err != nil {
			return nil, errors.Join(err, dir.Remove())
		}
		return &Warm{ID: id, Key: key, ImageName: name, Dir: dir, Container: ctr}, nil
	}
}

// twoImages keeps size containers of each of two images.
func twoImages(size int) func(context.Context) (map[Key]Target, error) {
	return func(context.Context) (map[Key]Target, error) {
		return map[Key]Target{
			{Image: "sha256:python", Runtime: "runc"}: {Name: "sandboxd/python", Size: size},
			{Image: "sha256:shell", Runtime: "runc"}:  {Name: "sandboxd/shell", Size: size},
		}, nil
	}
}

// TestPoolBacksOffWhileEveryPrepareFails is issue 29's pool: with a backend
// that fails every create, the pool tried 47 times in 27 s and logged each.
// Now each key waits 1 s, 2 s, 4 s ... (up to 5 min) between tries, says
// "failing" once and "recovered" once, and its state is in the pool's status
// (which the inventory and the metrics report).
func TestPoolBacksOffWhileEveryPrepareFails(t *testing.T) {
	rt := fake.New(idle)
	rt.SetPrepareErr(errors.New("runc create failed: can't get final child's PID from pipe: EOF"))
	var log testutil.Buffer
	clock := &manualClock{now: time.Now()}
	// The pool's own loop is not run: the test alone fills it, on its
	// clock.
	p := build(Config{Keys: twoImages(1), Busy: func() bool { return false },
		Prepare: prepareOn(rt, t.TempDir()), Log: slog.New(slog.NewTextHandler(&log, nil))})
	p.now = clock.Now
	t.Cleanup(func() {
		close(p.stopped)
		p.Close()
	})

	// Two images: one try of each per due time, however often the pool is
	// woken.
	tries := func() int {
		p.fill(true)
		for range 20 {
			p.fill(false)
		}
		return rt.PrepareAttempts()
	}
	base := tries()
	if after := tries(); after != base {
		t.Fatalf("%d prepares while backing off, want none", after-base)
	}
	for _, step := range []struct {
		advance time.Duration
		want    int // more prepares
	}{
		{time.Second, 2},            // the first wait (1 s) is over
		{time.Second, 0},            // the second wait is 2 s
		{time.Second, 2},            //
		{3 * time.Second, 0},        // then 4 s
		{time.Second, 2},            //
		{backoffMax + time.Hour, 2}, // never more than backoffMax
	} {
		clock.advance(step.advance)
		before := rt.PrepareAttempts()
		if got := tries() - before; got != step.want {
			t.Fatalf("after %v: %d prepares, want %d", step.advance, got, step.want)
		}
	}
	if n := strings.Count(log.String(), "failing"); n != 2 {
		t.Errorf("%d log lines say failing, want one per pool:\n%s", n, log.String())
	}
	if n := strings.Count(log.String(), "level=WARN"); n != 0 {
		t.Errorf("%d warnings logged, want the failures only as state changes", n)
	}

	pools, err := p.Status(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if len(pools) != 2 {
		t.Fatalf("pools = %+v, want two", pools)
	}
	for _, p := range pools {
		if p.FailingSince.IsZero() || !strings.Contains(p.Failure, "final child's PID") || p.Failures < 5 {
			t.Errorf("pool %s = %+v, want failing since the first try with the backend's reason", p.Image, p)
		}
	}

	rt.SetPrepareErr(nil)
	clock.advance(backoffMax)
	tries()
	if n := strings.Count(log.String(), "recovered"); n != 2 {
		t.Errorf("%d log lines say recovered, want one per pool:\n%s", n, log.String())
	}
	if pools, err = p.Status(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	for _, p := range pools {
		if !p.FailingSince.IsZero() || p.Ready != 1 {
			t.Errorf("pool %s = %+v, want recovered and full", p.Image, p)
		}
	}
}

func TestBackoffDoublesUpToItsMaximum(t *testing.T) {
	for _, tt := range []struct {
		tries int
		want  time.Duration
	}{{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {9, 256 * time.Second}, {10, backoffMax}, {1000, backoffMax}} {
		if got := backoff(tt.tries); got != tt.want {
			t.Errorf("backoff(%d) = %v, want %v", tt.tries, got, tt.want)
		}
	}
}

// TestPoolReusesWhatItFoundWithinRefillEvery: every finished task wakes
// the pool, which must not ask the backend about every image each time;
// what asks for fresh keys, and a look older than refillEvery, do.
func TestPoolReusesWhatItFoundWithinRefillEvery(t *testing.T) {
	var mu sync.Mutex
	looks := 0
	keys := func(context.Context) (map[Key]Target, error) {
		mu.Lock()
		defer mu.Unlock()
		looks++
		return map[Key]Target{{Image: "sha256:python", Runtime: "runc"}: {Name: "sandboxd/python"}}, nil
	}
	p := New(Config{Keys: keys, Busy: func() bool { return false }})
	p.Close() // its first fill looked once; no tick can look again
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return looks
	}
	ctx := context.Background()
	for range 5 {
		if _, err := p.serving(ctx, false); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(); n != 1 {
		t.Fatalf("the backend was asked %d times for 6 looks within refillEvery, want 1", n)
	}
	if _, err := p.serving(ctx, true); err != nil || count() != 2 {
		t.Fatalf("a fresh look asked the backend %d times in all (%v), want 2", count(), err)
	}
	p.mu.Lock()
	p.servedAt = time.Now().Add(-refillEvery)
	p.mu.Unlock()
	if _, err := p.serving(ctx, false); err != nil || count() != 3 {
		t.Fatalf("a look after refillEvery asked the backend %d times in all (%v), want 3", count(), err)
	}
}

// TestClaimGivesEachContainerOnceAndCloseRemovesTheRest: a claimed
// container is the task's, never handed out again; a key of another
// runtime is refused with the reason; Close removes what is still ready,
// container and folder.
func TestClaimGivesEachContainerOnceAndCloseRemovesTheRest(t *testing.T) {
	rt := fake.New(idle)
	root := t.TempDir()
	p := build(Config{Keys: twoImages(2), Busy: func() bool { return false }, Prepare: prepareOn(rt, root)})
	p.fill(true)
	key := Key{Image: "sha256:python", Runtime: "runc"}
	seen := map[string]bool{}
	for range 2 {
		w, why := p.Claim(key)
		if w == nil {
			t.Fatalf("no container claimed: %s", why)
		}
		if seen[w.ID] {
			t.Fatalf("container %s handed out twice", w.ID)
		}
		seen[w.ID] = true
	}
	if w, why := p.Claim(key); w != nil || why != "no pooled container was ready" {
		t.Fatalf("a third claim of a pool of 2 = %v, %q", w, why)
	}
	if _, why := p.Claim(Key{Image: "sha256:python", Runtime: "runsc"}); !strings.Contains(why, "serves the default runtime runc") {
		t.Fatalf("a claim on another runtime: %q", why)
	}
	close(p.stopped)
	p.Close()
	if n := rt.Prepared(); n != 4 {
		t.Fatalf("%d containers prepared, want 4", n)
	}
	entries, _ := os.ReadDir(root)
	if len(entries) != 2 {
		t.Fatalf("%d task folders after Close, want the 2 claimed ones only", len(entries))
	}
}
