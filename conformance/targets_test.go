//go:build integration

package conformance

import (
	"testing"

	"github.com/sandboxd/sandboxd/internal/testutil/engines"
	"github.com/sandboxd/sandboxd/runtime"
)

func TestDockerRunc(t *testing.T)      { Run(t, target(t, engines.Docker, "runc")) }
func TestDockerCrun(t *testing.T)      { Run(t, target(t, engines.Docker, "crun")) }
func TestDockerRunsc(t *testing.T)     { Run(t, target(t, engines.Docker, "runsc")) }
func TestContainerdRunc(t *testing.T)  { Run(t, target(t, engines.Containerd, "runc")) }
func TestContainerdCrun(t *testing.T)  { Run(t, target(t, engines.Containerd, "crun")) }
func TestContainerdRunsc(t *testing.T) { Run(t, target(t, engines.Containerd, "runsc")) }

func target(t *testing.T, connect func(testing.TB, ...engines.Options) engines.Engine, ociRuntime string) Target {
	e := connect(t)
	return Target{Runtime: e.Runtime, OCIRuntime: ociRuntime, Leftovers: e.Leftovers,
		WithEgress: func(t testing.TB, gw runtime.EgressGateway, instance string) runtime.Runtime {
			return connect(t, engines.Options{Egress: gw, Instance: instance}).Runtime
		}}
}
