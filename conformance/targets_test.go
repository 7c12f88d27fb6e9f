//go:build integration

package conformance

import (
	"testing"

	"github.com/sandboxd/sandboxd/internal/testutil/engines"
	"github.com/sandboxd/sandboxd/runtime"
)

// The per-language smoke tests run once on the host's kernel and once on
// gVisor's: what tells languages apart (images, compile steps, the init's
// word on them) depends on neither the backend nor runc against crun.
func TestDockerRunc(t *testing.T)      { Run(t, target(t, engines.Docker, "runc", true)) }
func TestDockerCrun(t *testing.T)      { Run(t, target(t, engines.Docker, "crun", false)) }
func TestDockerRunsc(t *testing.T)     { Run(t, target(t, engines.Docker, "runsc", false)) }
func TestContainerdRunc(t *testing.T)  { Run(t, target(t, engines.Containerd, "runc", false)) }
func TestContainerdCrun(t *testing.T)  { Run(t, target(t, engines.Containerd, "crun", false)) }
func TestContainerdRunsc(t *testing.T) { Run(t, target(t, engines.Containerd, "runsc", true)) }

func target(t *testing.T, connect func(testing.TB, ...engines.Options) engines.Engine, ociRuntime string, languages bool) Target {
	e := connect(t)
	return Target{Runtime: e.Runtime, OCIRuntime: ociRuntime, Languages: languages, Leftovers: e.Leftovers,
		WithEgress: func(t testing.TB, gw runtime.EgressGateway, instance string) runtime.Runtime {
			return connect(t, engines.Options{Egress: gw, Instance: instance}).Runtime
		}}
}
