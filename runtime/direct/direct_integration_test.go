//go:build integration

package direct_test

import (
	"testing"

	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/internal/testutil/backends"
	"github.com/sandboxd/sandboxd/runtime/runtimetest"
)

func TestContract(t *testing.T) {
	e := backends.Direct(t)
	for _, oci := range []string{"runc", "crun", "runsc"} {
		t.Run(oci, func(t *testing.T) {
			runtimetest.Run(t, runtimetest.Target{Runtime: e.Runtime, Image: "sandboxd/shell", OCIRuntime: oci,
				Program: testutil.BuildStatic(t, "./internal/testprog/cmd/testprog"), Leftovers: e.Leftovers})
		})
	}
}

func TestImageFollowsAMovedName(t *testing.T) {
	backends.FollowsAMovedName(t, backends.Direct(t))
}

func TestRuncIsCurrent(t *testing.T) { backends.RuncIsCurrent(t, backends.Direct(t)) }
