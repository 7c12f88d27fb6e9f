//go:build integration

package containerd_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/internal/testutil/backends"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/runtimetest"
)

func TestContract(t *testing.T) {
	e := backends.Containerd(t)
	for _, oci := range []string{"runc", "crun", "runsc"} {
		t.Run(oci, func(t *testing.T) {
			runtimetest.Run(t, runtimetest.Target{Runtime: e.Runtime, Image: "sandboxd/shell", OCIRuntime: oci,
				Program: testutil.BuildStatic(t, "./internal/testprog/cmd/testprog"), Leftovers: e.Leftovers})
		})
	}
}

// TestShimGroups: the containers of one daemon instance and OCI runtime
// share one shim, and the shared shim ends with its last container.
func TestShimGroups(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, program, img := shimTest(ctx, t)
	for _, oci := range []string{"runc", "crun", "runsc"} {
		t.Run(oci, func(t *testing.T) {
			instance := fmt.Sprintf("shimgroup-%d-%s", os.Getpid(), oci)
			labels := map[string]string{"io.sandboxd.instance": instance}
			var cs []runtime.Container
			t.Cleanup(func() {
				for _, c := range cs {
					c.Remove(context.Background())
				}
			})
			for i := range 3 {
				c, err := e.Runtime.Start(ctx, blocking(fmt.Sprintf("%s-%d", instance, i), img, oci, program, labels))
				if err != nil {
					t.Fatalf("Start() = %v", err)
				}
				cs = append(cs, c)
			}
			left, err := e.Leftovers(ctx, labels)
			if err != nil {
				t.Fatal(err)
			}
			if shims := shimsIn(left); len(shims) != 1 {
				t.Fatalf("3 containers of one instance on %s have shims %v, want one", oci, shims)
			}
			for _, c := range cs {
				if err := c.Remove(ctx); err != nil {
					t.Fatalf("Remove() = %v", err)
				}
			}
			if left := leftAfterRemoval(ctx, t, e, labels); len(left) > 0 {
				t.Fatalf("left after the containers' removal: %v", left)
			}
		})
	}
}

// TestShimGroupFoundedOnce starts the first containers of a group at once,
// as a pool filling two images does: one shim must serve them all, and
// none may outlive them (two `shim start`s racing for a new group's
// socket each started a shim, and one served nothing and never ended).
func TestShimGroupFoundedOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e, program, img := shimTest(ctx, t)
	const rounds, together = 8, 4
	// The race is `shim start`'s, before any OCI runtime runs; runsc's
	// group is founded by the same code, and its slow creates would add
	// half a minute.
	for _, oci := range []string{"runc", "crun"} {
		t.Run(oci, func(t *testing.T) {
			for round := range rounds {
				instance := fmt.Sprintf("founding-%d-%s-%d", os.Getpid(), oci, round)
				labels := map[string]string{"io.sandboxd.instance": instance}
				cs := make([]runtime.Container, together)
				errs := make([]error, together)
				var wg sync.WaitGroup
				for i := range together {
					wg.Go(func() {
						cs[i], errs[i] = e.Runtime.Start(ctx, blocking(fmt.Sprintf("%s-%d", instance, i), img, oci, program, labels))
					})
				}
				wg.Wait()
				left, err := e.Leftovers(ctx, labels)
				shims := len(shimsIn(left))
				for _, c := range cs {
					if c != nil {
						if err := c.Remove(ctx); err != nil {
							t.Errorf("Remove() = %v", err)
						}
					}
				}
				if err := errors.Join(errs...); err != nil {
					t.Fatalf("round %d: Start() = %v", round, err)
				}
				if err != nil {
					t.Fatal(err)
				}
				if shims != 1 {
					t.Errorf("round %d: %d containers started at once have %d shims, want 1", round, together, shims)
				}
				if left := leftAfterRemoval(ctx, t, e, labels); len(left) > 0 {
					killShims(left)
					t.Fatalf("round %d: left after the containers' removal: %v", round, left)
				}
			}
		})
	}
}

// TestShimGroupOutlivesItsLastTask removes a group's only container as
// the next one is being made: the shim ends when its last container is
// deleted, and a task whose `shim start` had found that shim just before
// would send its create to a shim on its way out. Every start must work,
// and no shim may be left.
func TestShimGroupOutlivesItsLastTask(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e, program, img := shimTest(ctx, t)
	const rounds = 41
	instance := fmt.Sprintf("handover-%d", os.Getpid())
	labels := map[string]string{"io.sandboxd.instance": instance}
	t.Cleanup(func() {
		// What a failed round left: its containers, then their shims.
		if _, err := e.Runtime.Reap(context.Background(), labels); err != nil {
			t.Errorf("reap what the test left: %v", err)
		}
		killShims(leftAfterRemoval(context.Background(), t, e, labels))
	})
	prev, err := e.Runtime.Start(ctx, blocking(instance+"-first", img, "runc", program, labels))
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	for round := range rounds {
		// The removal begins from 40 ms before the start to 40 ms after
		// it, to sweep the start's window between `shim start` and its
		// create.
		lead := time.Duration(round-rounds/2) * 2 * time.Millisecond
		var removeErr error
		removed := make(chan struct{})
		go func() {
			defer close(removed)
			time.Sleep(max(lead, 0))
			removeErr = prev.Remove(ctx)
		}()
		time.Sleep(max(-lead, 0))
		next, err := e.Runtime.Start(ctx, blocking(fmt.Sprintf("%s-%d", instance, round), img, "runc", program, labels))
		<-removed
		if removeErr != nil {
			t.Errorf("round %d: Remove() = %v", round, removeErr)
		}
		if err != nil {
			t.Fatalf("round %d: Start() as the group's last container went = %v", round, err)
		}
		prev = next
	}
	if err := prev.Remove(ctx); err != nil {
		t.Fatalf("Remove() = %v", err)
	}
	if left := leftAfterRemoval(ctx, t, e, labels); len(left) > 0 {
		t.Fatalf("left after the containers' removal: %v", left)
	}
}

// shimTest is the backend, the test program and the shell image's ID that
// the shim tests start containers of.
func shimTest(ctx context.Context, t *testing.T) (backends.Backend, string, string) {
	e := backends.Containerd(t)
	program := testutil.BuildStatic(t, "./internal/testprog/cmd/testprog")
	img, err := e.Runtime.Image(ctx, "sandboxd/shell")
	if err != nil {
		t.Fatal(err)
	}
	return e, program, img.ID
}

// shimsIn are the shims among leftovers.
func shimsIn(leftovers []string) []string {
	var shims []string
	for _, l := range leftovers {
		if strings.HasPrefix(l, "shim ") {
			shims = append(shims, l)
		}
	}
	return shims
}

// leftAfterRemoval is what is left of labels' containers once their
// removal had 10 s to end their shims.
func leftAfterRemoval(ctx context.Context, t *testing.T, e backends.Backend, labels map[string]string) []string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		left, err := e.Leftovers(ctx, labels)
		if err != nil {
			t.Fatal(err)
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
	}
}

// killShims ends the shims among leftovers ("shim PID for ID"), which no
// container holds: containerd no longer knows them.
func killShims(leftovers []string) {
	for _, l := range leftovers {
		var pid int
		if _, err := fmt.Sscanf(l, "shim %d for", &pid); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// blocking is a container of the test program that blocks until killed.
func blocking(id, image, oci, program string, labels map[string]string) runtime.Spec {
	return runtime.Spec{
		ID: id, Image: image, Runtime: oci,
		Argv: []string{runtimetest.ProgramTarget, "block"}, Env: []string{"PATH=/usr/bin:/bin"},
		WorkingDir: "/tmp", User: "65534:65534", Hostname: "blocking", Labels: labels,
		Tmpfs:     []runtime.Tmpfs{{Target: "/tmp", SizeBytes: 1 << 20}},
		Resources: runtime.Resources{MemoryBytes: 64 << 20, CPUMillis: 500, Pids: 32, NoFile: 64},
		Mounts:    []runtime.Mount{{Source: program, Target: runtimetest.ProgramTarget, ReadOnly: true}},
		Stdout:    io.Discard, Stderr: io.Discard,
	}
}

// TestCrunGetsItsFilterBack: crun compiles the seccomp profile for the
// first container only; later ones carry the program it compiled.
func TestCrunGetsItsFilterBack(t *testing.T) {
	e := backends.Containerd(t)
	program := testutil.BuildStatic(t, "./internal/testprog/cmd/testprog")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	img, err := e.Runtime.Image(ctx, "sandboxd/shell")
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("crunfilter-%d", os.Getpid())
	var annotations []map[string]string
	for i := range 2 {
		c, err := e.Runtime.Start(ctx, blocking(fmt.Sprintf("%s-%d", id, i), img.ID, "crun", program, map[string]string{"io.sandboxd.instance": id}))
		if err != nil {
			t.Fatalf("Start() = %v", err)
		}
		defer c.Remove(context.Background())
		a, err := e.Annotations(ctx, fmt.Sprintf("sandboxd-%s-%d", id, i))
		if err != nil {
			t.Fatal(err)
		}
		annotations = append(annotations, a)
	}
	if _, ok := annotations[0]["run.oci.seccomp_bpf_data"]; ok {
		t.Fatal("the first crun container was given a compiled filter")
	}
	compiled, err := os.ReadFile(fmt.Sprintf("/run/containerd/runc/sandboxd/sandboxd-%s-0/seccomp.bpf", id))
	if err != nil {
		t.Fatal(err)
	}
	if got := annotations[1]["run.oci.seccomp_bpf_data"]; got != base64.StdEncoding.EncodeToString(compiled) {
		t.Fatalf("the second container's filter annotation is %d characters, want the %d bytes crun compiled for the first", len(got), len(compiled))
	}
}

// TestImageFollowsAMovedName: Image keeps what it resolved of a name
// while containerd's image events say no image changed, and an image's
// config by the digest of its target, so a name moved to another image
// gives that image's ID, labels and environment once containerd has told
// of the move, and never the old ones after.
func TestImageFollowsAMovedName(t *testing.T) {
	backends.FollowsAMovedName(t, backends.Containerd(t))
}

// TestUnpacksAPackedImage: a container of an image whose layers were never
// unpacked gets them unpacked first, and runs.
func TestUnpacksAPackedImage(t *testing.T) {
	e := backends.Containerd(t)
	program := testutil.BuildStatic(t, "./internal/testprog/cmd/testprog")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ref := fmt.Sprintf("sandboxd-test/packed-%d", os.Getpid())
	chain := backends.ImportPacked(t, ref)
	if backends.HasSnapshot(t, chain) {
		t.Fatalf("the snapshot of %s's layer, %s, is there before any container", ref, chain)
	}
	img, err := e.Runtime.Image(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("packed-%d", os.Getpid())
	labels := map[string]string{"io.sandboxd.instance": id}
	c, err := e.Runtime.Start(ctx, blocking(id, img.ID, "crun", program, labels))
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	defer c.Remove(context.Background())
	if !backends.HasSnapshot(t, chain) {
		t.Errorf("a container of %s runs, and its layer's snapshot %s is missing", ref, chain)
	}
}

// TestRuncIsCurrent: containerd's runc shim runs the set-up's pinned runc,
// whose path the backend names to it, and the backend says so.
func TestRuncIsCurrent(t *testing.T) { backends.RuncIsCurrent(t, backends.Containerd(t)) }
