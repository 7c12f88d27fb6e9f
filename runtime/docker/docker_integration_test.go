//go:build integration

package docker_test

import (
	"testing"

	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/internal/testutil/backends"
	"github.com/sandboxd/sandboxd/runtime/runtimetest"
)

func TestContract(t *testing.T) {
	e := backends.Docker(t)
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
	backends.FollowsAMovedName(t, backends.Docker(t))
}

// TestRuncIsCurrent: Docker runs the set-up's pinned runc, and says so.
func TestRuncIsCurrent(t *testing.T) { backends.RuncIsCurrent(t, backends.Docker(t)) }
