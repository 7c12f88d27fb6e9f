//go:build integration

package conformance

import (
	"testing"

	"github.com/sandboxd/sandboxd/internal/testutil/backends"
	"github.com/sandboxd/sandboxd/runtime"
)

// One test per pair; each runs the cases that CI's matrix puts on it (see
// Axis), or every case under SANDBOXD_MATRIX=all. Each is over 60 s, as a
// suite of ~35-100 cases is: every case on one pair takes 128-207 s on the
// direct backend (direct/crun, the reference pair, runs every case in
// CI), each case's time in the report.

func TestDockerRunc(t *testing.T)      { Run(t, target(t, backends.Docker, "docker", "runc")) }
func TestDockerCrun(t *testing.T)      { Run(t, target(t, backends.Docker, "docker", "crun")) }
func TestDockerRunsc(t *testing.T)     { Run(t, target(t, backends.Docker, "docker", "runsc")) }
func TestContainerdRunc(t *testing.T)  { Run(t, target(t, backends.Containerd, "containerd", "runc")) }
func TestContainerdCrun(t *testing.T)  { Run(t, target(t, backends.Containerd, "containerd", "crun")) }
func TestContainerdRunsc(t *testing.T) { Run(t, target(t, backends.Containerd, "containerd", "runsc")) }
func TestDirectRunc(t *testing.T)      { Run(t, target(t, backends.Direct, "direct", "runc")) }
func TestDirectCrun(t *testing.T)      { Run(t, target(t, backends.Direct, "direct", "crun")) }
func TestDirectRunsc(t *testing.T)     { Run(t, target(t, backends.Direct, "direct", "runsc")) }

func target(t *testing.T, connect func(testing.TB, ...backends.Options) backends.Backend, backend, ociRuntime string) Target {
	e := connect(t)
	return Target{Runtime: e.Runtime, Backend: backend, OCIRuntime: ociRuntime, Leftovers: e.Leftovers,
		WithEgress: func(t testing.TB, gw runtime.EgressGateway, instance string) runtime.Runtime {
			return connect(t, backends.Options{Egress: gw, Instance: instance}).Runtime
		}}
}
