package task

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
)

// pooled returns a service with a pool of size on rt, ready.
func pooled(t *testing.T, rt *fake.Runtime, size int, mutate func(*Config), opts ...Option) *Service {
	t.Helper()
	s := newService(t, rt, func(c *Config) {
		c.PoolSize = size
		if mutate != nil {
			mutate(c)
		}
	}, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.PoolReady(ctx); err != nil {
		t.Fatalf("the pool did not fill: %v", err)
	}
	return s
}

func echo(ctx context.Context, spec runtime.Spec) runtime.Exit {
	io.WriteString(spec.Stdout, strings.Join(spec.Argv, " "))
	return runtime.Exit{}
}

func TestPoolRunsWarmWithTheTasksLimits(t *testing.T) {
	rt := fake.New(echo)
	s := pooled(t, rt, 2, nil)
	if n := rt.Prepared(); n != 4 {
		t.Fatalf("%d containers prepared, want 2 for each of the 2 images", n)
	}
	rec := newRecorder()
	lim := limits.Limits{MemoryBytes: 128 << 20, CPUMillis: 250, Pids: 16}
	res, err := s.Run(context.Background(), run.Request{Program: code("print(1)"), Options: run.Options{Limits: lim}}, rec)
	if err != nil {
		t.Fatal(err)
	}
	if res.Start != run.StartWarm || res.ColdReason != "" || res.Status != run.StatusOK {
		t.Fatalf("result = %+v, want a warm OK run", res)
	}
	if got := rec.text(run.Stdout); got != "python3 /code/main.py" {
		t.Errorf("the pooled container ran %q", got)
	}
	specs := rt.Specs()
	launched := specs[len(specs)-1]
	want := runtime.Resources{MemoryBytes: 128 << 20, CPUMillis: 250, Pids: 16, NoFile: 1024}
	if launched.Resources != want {
		t.Errorf("the task ran with %+v, want its own limits %+v", launched.Resources, want)
	}
	if launched.Labels[LabelRun] != res.RunID {
		t.Errorf("the container's run label %q is not the run's ID %q", launched.Labels[LabelRun], res.RunID)
	}
	// The claimed container is replaced.
	deadline := time.Now().Add(5 * time.Second)
	for rt.Prepared() < 5 {
		if time.Now().After(deadline) {
			t.Fatal("the pool did not refill")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestPoolColdReasons(t *testing.T) {
	rt := fake.New(echo)
	rt.Runtimes = append(rt.Runtimes, runtime.OCIRuntime{Name: "runsc", Version: "gvisor"})
	s := pooled(t, rt, 1, nil)
	tests := []struct {
		name string
		req  run.Request
		want string
	}{
		{"operator mount", run.Request{Program: code("x"), Options: run.Options{Mounts: []string{"data"}}}, "mounts /mnt/data"},
		{"disk size", run.Request{Program: code("x"), Options: run.Options{Limits: limits.Limits{DiskBytes: 8 << 20}}}, "disk size"},
		{"another runtime", run.Request{Program: code("x"), Options: run.Options{Runtime: "runsc"}}, "not runsc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := s.Run(operatorCtx(), tt.req, newRecorder())
			if err != nil {
				t.Fatal(err)
			}
			if res.Start != run.StartCold || !strings.Contains(res.ColdReason, tt.want) || res.Status != run.StatusOK {
				t.Fatalf("result %s %q %s, want cold because of %q", res.Start, res.ColdReason, res.Status, tt.want)
			}
		})
	}
}

// TestPoolEmptyRunsCold: when the pool cannot prepare containers, runs go
// cold and say why.
func TestPoolEmptyRunsCold(t *testing.T) {
	rt := fake.New(echo)
	rt.PrepareErr = errors.New("the backend refuses")
	s := newService(t, rt, func(c *Config) { c.PoolSize = 1 })
	res, err := s.Run(context.Background(), run.Request{Program: code("x")}, newRecorder())
	if err != nil {
		t.Fatal(err)
	}
	if res.Start != run.StartCold || res.ColdReason != "no pooled container was ready" || res.Status != run.StatusOK {
		t.Fatalf("result %s %q %s", res.Start, res.ColdReason, res.Status)
	}
}

// TestPoolNeverReusesAContainer runs many tasks; each must get a container
// of its own, launched once.
func TestPoolNeverReusesAContainer(t *testing.T) {
	rt := fake.New(echo)
	s := pooled(t, rt, 2, nil)
	seen := map[string]bool{}
	warm := 0
	for range 50 {
		res, err := s.Run(context.Background(), run.Request{Program: code("x")}, newRecorder())
		if err != nil {
			t.Fatal(err)
		}
		if seen[res.RunID] {
			t.Fatalf("run %s got a container another run had", res.RunID)
		}
		seen[res.RunID] = true
		if res.Start == run.StartWarm {
			warm++
		}
	}
	ids := map[string]int{}
	for _, spec := range rt.Specs() {
		ids[spec.ID]++
	}
	for id, n := range ids {
		if n > 1 {
			t.Fatalf("container %s ran %d programs", id, n)
		}
	}
	if warm == 0 {
		t.Fatal("no run was warm")
	}
	t.Logf("%d of 50 runs were warm", warm)
}

// TestPoolYieldsToAFullLoad: while tasks hold every slot, the pool does not
// prepare containers; once a slot frees, it refills.
func TestPoolYieldsToAFullLoad(t *testing.T) {
	rt := fake.New(untilKilled)
	s := pooled(t, rt, 1, func(c *Config) { c.MaxRunning = 1 })
	before := rt.Prepared()
	started := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		s.Run(context.Background(), run.Request{Program: code("x")}, &notifyStart{recorder: newRecorder(), ids: started})
		close(done)
	}()
	id := <-started
	time.Sleep(300 * time.Millisecond)
	if n := rt.Prepared(); n != before {
		t.Fatalf("the pool prepared %d containers while a task held the only slot", n-before)
	}
	s.Cancel(context.Background(), id)
	<-done
	deadline := time.Now().Add(5 * time.Second)
	for rt.Prepared() == before {
		if time.Now().After(deadline) {
			t.Fatal("the pool did not refill once the slot was free")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPoolFallsBackWhenAPooledContainerDied: a pooled container that cannot
// take its task is removed, and the task runs cold.
func TestPoolFallsBackWhenAPooledContainerDied(t *testing.T) {
	rt := fake.New(echo)
	s := pooled(t, rt, 1, nil)
	for _, id := range rt.Live() {
		rt.Kill(id) // as when the backend restarts
	}
	res, err := s.Run(context.Background(), run.Request{Program: code("x")}, newRecorder())
	if err != nil {
		t.Fatal(err)
	}
	if res.Start != run.StartCold || !strings.Contains(res.ColdReason, "pooled container failed") || res.Status != run.StatusOK {
		t.Fatalf("result %s %q %s", res.Start, res.ColdReason, res.Status)
	}
}

// TestPoolDropsContainersOfARebuiltImage: when an image's ID changes, its
// pooled containers go and new ones come.
func TestPoolDropsContainersOfARebuiltImage(t *testing.T) {
	rt := fake.New(echo)
	// The rebuilt image's digest is allowed, as the lock rewritten by
	// the rebuild would name it.
	s := pooled(t, rt, 1, func(c *Config) { c.AllowedImages = append(c.AllowedImages, "sha256:python-v2") })
	old := rt.Live()
	rt.SetImage("sandboxd/python", "sha256:python-v2")
	s.pool.Nudge()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.PoolReady(ctx); err != nil {
		t.Fatal(err)
	}
	live := map[string]bool{}
	for _, id := range rt.Live() {
		live[id] = true
	}
	stale := 0
	for _, id := range old {
		if live[id] {
			stale++
		}
	}
	if stale != 1 || len(live) != 2 {
		t.Fatalf("%d of the old containers remain of %d live; want the shell one kept, the python one replaced", stale, len(live))
	}
	res, _ := s.Run(context.Background(), run.Request{Program: code("x")}, newRecorder())
	if res.Start != run.StartWarm {
		t.Fatalf("a run on the rebuilt image: %s %q", res.Start, res.ColdReason)
	}
}

func TestPoolStatusInTheInventory(t *testing.T) {
	rt := fake.New(echo)
	s := pooled(t, rt, 2, nil)
	inv, err := s.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Pools) != 2 || inv.Pools[0] != (PoolStatus{Image: "sandboxd/python", Runtime: "runc", Ready: 2, Size: 2}) {
		t.Fatalf("pools = %+v", inv.Pools)
	}
}

// TestOperatorRecipeIsPooledAndChosenByName: an operator's recipe, added by
// SetCatalog (a SIGHUP), gets a pool of the size its recipe says, appears
// in the inventory, runs the language it declares its own way when a
// request names it, and can be granted per tenant.
func TestOperatorRecipeIsPooledAndChosenByName(t *testing.T) {
	rt := fake.New(echo)
	s := pooled(t, rt, 1, func(c *Config) { c.AllowedImages = append(c.AllowedImages, "sha256:data") })
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "data"), 0o755)
	os.WriteFile(filepath.Join(dir, "data", images.RecipeFile), []byte("from python\npackages python3-polars\nlanguage python main.py python3 -X importtime\npool 3\n"), 0o644)
	catalog, err := images.WithDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(context.Background(), run.Request{Program: code("x"), Options: run.Options{Image: "sandboxd/data"}}, newRecorder()); err == nil {
		t.Fatal("an image the catalog does not have yet ran")
	}
	rt.SetImage("sandboxd/data", "sha256:data")
	if err := s.SetCatalog(catalog); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.PoolReady(ctx); err != nil {
		t.Fatal(err)
	}
	inv, err := s.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var sizes []string
	for _, p := range inv.Pools {
		sizes = append(sizes, fmt.Sprintf("%s=%d/%d", p.Image, p.Ready, p.Size))
	}
	if got := strings.Join(sizes, " "); got != "sandboxd/data=3/3 sandboxd/python=1/1 sandboxd/shell=1/1" {
		t.Fatalf("pools = %s", got)
	}
	rec := newRecorder()
	res, err := s.Run(context.Background(), run.Request{Program: code("x"), Options: run.Options{Image: "sandboxd/data"}}, rec)
	if err != nil {
		t.Fatal(err)
	}
	if res.Start != run.StartWarm || rec.text(run.Stdout) != "python3 -X importtime /code/main.py" {
		t.Fatalf("run on sandboxd/data: %s %q, argv %q", res.Start, res.ColdReason, rec.text(run.Stdout))
	}
	// A tenant granted only python may not use it.
	caller := access.Caller{Name: "alpha", Tenant: &access.Tenant{Name: "alpha", Images: []string{"sandboxd/python"}}}
	_, err = s.Run(access.WithCaller(context.Background(), caller), run.Request{Program: code("x"), Options: run.Options{Image: "sandboxd/data"}}, newRecorder())
	if !errdefs.IsPermissionDenied(err) || !strings.Contains(err.Error(), `image: "sandboxd/data" is not granted to tenant alpha`) {
		t.Fatalf("a tenant not granted the image: %v", err)
	}
	if err := s.CheckTenants([]access.Tenant{{Name: "beta", Images: []string{"sandboxd/data"}}}); err != nil {
		t.Errorf("a tenant granted the operator's image: %v", err)
	}
}
