// Package conformance is the engine suite: the behaviour every backend and
// OCI runtime pair must show, checked with real containers through the task
// engine: output streaming and caps, memory, pids, CPU, disk and time
// limits, isolation, network, stdin and inputs, cancellation, bundles,
// sessions, pre-started interpreters, programs that call tools (from runs
// and sessions' calls, through a real MCP server), and that nothing is
// left behind. Its tests (build tag integration) run it on
// docker, containerd and the direct backend, each with runc, crun and
// runsc, and the warm pool off and on, each case on the pairs its axis
// needs (matrix_test.go). The Runtime contract itself is checked by runtime/runtimetest.
//
// Where gVisor (runsc) really behaves differently from the host kernel, the
// suite checks gVisor's behaviour, and says so:
//
//   - The program's processes live inside gVisor's kernel: the host's /proc
//     does not show them (the kill of every process is checked from inside).
//   - /proc/version and dmesg name gVisor, not the host's kernel.
//   - The pids limit is RLIMIT_NPROC, enforced by gVisor's kernel per sandbox
//     (fork fails with EAGAIN as under runc); see lifecycle.PidsLimits.
//   - Writing to a read-only mount fails with EACCES rather than EROFS.
//   - /proc/self/status shows Seccomp 0: the host filters gVisor itself,
//     not the program.
//   - There is no /sys/class/net; interfaces are listed with if_nameindex.
//   - FIFOs and sockets a program makes in /workspace stay inside gVisor:
//     the host, and so the bundle, does not see them.
//   - A write to a stdout pipe may be short where Linux blocks; buffered
//     writers retry, which is why the python image line-buffers stdout
//     rather than unbuffering it.
package conformance
