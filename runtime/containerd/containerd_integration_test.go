//go:build integration

package containerd_test

import (
	"testing"

	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/internal/testutil/engines"
	"github.com/sandboxd/sandboxd/runtime/runtimetest"
)

func TestContract(t *testing.T) {
	e := engines.Containerd(t)
	for _, oci := range []string{"runc", "crun", "runsc"} {
		t.Run(oci, func(t *testing.T) {
			runtimetest.Run(t, runtimetest.Target{Runtime: e.Runtime, Image: "sandboxd/shell", OCIRuntime: oci,
				Program: testutil.BuildStatic(t, "./internal/testprog/cmd/testprog"), Leftovers: e.Leftovers})
		})
	}
}
