//go:build integration

package docker_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/internal/testutil/engines"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/runtimetest"
)

func TestContract(t *testing.T) {
	e := engines.Docker(t)
	for _, oci := range []string{"runc", "crun", "runsc"} {
		t.Run(oci, func(t *testing.T) {
			runtimetest.Run(t, runtimetest.Target{Runtime: e.Runtime, Image: "sandboxd/shell", OCIRuntime: oci,
				Program: testutil.BuildStatic(t, "./internal/testprog/cmd/testprog"), Leftovers: e.Leftovers})
		})
	}
}

// TestImageFollowsAMovedName: Image keeps what it inspected of a name
// while Docker's image events say no image changed, so a name moved to
// another image gives that image's ID, labels and environment once
// Docker has told of the move, and never the old ones after.
func TestImageFollowsAMovedName(t *testing.T) {
	e := engines.Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shell, err := e.Runtime.Image(ctx, "sandboxd/shell")
	if err != nil {
		t.Fatal(err)
	}
	python, err := e.Runtime.Image(ctx, "sandboxd/python")
	if err != nil {
		t.Fatal(err)
	}
	if shell.ID == python.ID {
		t.Fatalf("sandboxd/shell and sandboxd/python are one image, %s: the test needs two", shell.ID)
	}
	name := "sandboxd.test/moved:" + fmt.Sprint(os.Getpid())
	for i, want := range []runtime.Image{shell, python, shell} {
		if err := e.Tag(ctx, t, name, want.Ref); err != nil {
			t.Fatal(err)
		}
		moved := time.Now()
		var got runtime.Image
		stale := -1
		for got.ID != want.ID {
			stale++
			if got, err = e.Runtime.Image(ctx, name); err != nil {
				t.Fatal(err)
			}
			if time.Since(moved) > 5*time.Second {
				t.Fatalf("move %d: %s is still %s 5s after it was moved to %s's %s", i, name, got.ID, want.Ref, want.ID)
			}
		}
		t.Logf("move %d seen after %v, %d answers before it the old image's", i, time.Since(moved), stale)
		for range 2 { // the kept one
			got, err := e.Runtime.Image(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != want.ID || got.Ref != name || fmt.Sprint(got.Env) != fmt.Sprint(want.Env) || fmt.Sprint(got.Labels) != fmt.Sprint(want.Labels) {
				t.Fatalf("move %d: %s is %s %v %v, want %s's %s %v %v", i, name, got.ID, got.Env, got.Labels, want.Ref, want.ID, want.Env, want.Labels)
			}
		}
	}
}
