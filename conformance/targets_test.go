//go:build integration

package conformance

import (
	"testing"

	"github.com/sandboxd/sandboxd/internal/testutil/engines"
)

func TestDockerRunc(t *testing.T)      { Run(t, target(engines.Docker(t), "runc")) }
func TestDockerRunsc(t *testing.T)     { Run(t, target(engines.Docker(t), "runsc")) }
func TestContainerdRunc(t *testing.T)  { Run(t, target(engines.Containerd(t), "runc")) }
func TestContainerdRunsc(t *testing.T) { Run(t, target(engines.Containerd(t), "runsc")) }

func target(e engines.Engine, ociRuntime string) Target {
	return Target{Runtime: e.Runtime, OCIRuntime: ociRuntime, Leftovers: e.Leftovers}
}
