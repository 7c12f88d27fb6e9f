package containerd

import (
	"github.com/containerd/containerd/v2/pkg/oci"
)

const (
	// shimRuntimeRoot is where containerd's runc shim keeps its OCI
	// runtime's state by default, a folder per namespace, then container.
	shimRuntimeRoot = "/run/containerd/runc"
	// shimGroup is the annotation by which containerd's runc shim serves
	// containers that carry the same value from one shim process.
	shimGroup = "io.containerd.runc.v2.group"
	// instanceLabel is task.LabelInstance: the daemon instance whose
	// container it is. Its containers share shims with no other's.
	instanceLabel = "io.sandboxd.instance"
)

// withShimGroup puts the container in group (shimGroupOf): an instance's
// containers of one OCI runtime share a shim, as a Kubernetes pod's do: a
// shim of its own is one more Go process started and ended per task, beside
// the `shim start` and `shim delete` containerd 1.6 runs for each anyway
// (docs/benchmarks.md).
// The shim is a host process outside every container, so sharing it joins
// no two tasks; under runsc each container is still a sandbox of its own.
func withShimGroup(group string) oci.SpecOpts {
	return oci.WithAnnotations(map[string]string{shimGroup: group})
}
