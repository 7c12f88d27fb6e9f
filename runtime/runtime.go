// Package runtime is the contract between the task engine and the
// backends that run tasks' containers, and the types they share. It
// imports no backend's SDK.
//
// Every container a Runtime starts, whatever the Spec says, has: a read-only
// root file system, no-new-privileges, sandboxd's seccomp profile (also
// under gVisor), no network interface but loopback (up) unless the Spec
// asks for a link to the egress gateway, its own PID and
// cgroup namespaces with sandboxd's init (cmd/sandboxd-init) as PID 1,
// RLIMIT_CORE 0, and the Spec's memory (without swap), CPU, pids and nofile
// limits. The program runs as the Spec's non-root user with no capability,
// out of reach of the init, which is root of the container with only the
// few capabilities it needs. The contract suite in
// runtime/runtimetest holds each Runtime to this contract, and the backend
// suite in conformance checks the isolation on every backend and runtime.
package runtime

import (
	"context"
	"io"
	"net"
	"net/netip"
	"time"
)

// Runtime starts containers on one backend.
type Runtime interface {
	// Info reports the backend and the OCI runtimes it can run.
	Info(ctx context.Context) (Info, error)
	// Image resolves an image reference to the image present in the backend.
	// It returns a not-found error when the backend has no such image.
	Image(ctx context.Context, ref string) (Image, error)
	// Start creates and starts a container. The container's stdout and
	// stderr are copied to spec.Stdout and spec.Stderr as they are produced,
	// from the moment it starts, until it exits.
	Start(ctx context.Context, spec Spec) (Container, error)
	// Reap removes every container, and what belongs to it, that carries
	// all of the labels, running or not. It is how a daemon clears what an
	// earlier instance of itself left behind.
	Reap(ctx context.Context, labels map[string]string) (int, error)
}

// Preparer is the optional ability of a Runtime to start a container before
// its task is known, for a warm pool. The container's init waits on its
// stdin for the one task; nothing else is ever started in it.
type Preparer interface {
	// Prepare creates and starts a container from spec, whose Argv, Env,
	// Stdin, Stdout and Stderr are ignored: Launch gives them, and the
	// task's working directory. The init waits in spec.WorkingDir.
	Prepare(ctx context.Context, spec Spec) (Prepared, error)
}

// Prepared is a started container waiting for its task.
type Prepared interface {
	Container
	// Launch gives the container its task: it applies the limits that
	// differ from those it was prepared with, connects the output to
	// task's writers, and sends the task and its stdin to the init. An
	// error means the program did not start, and the container is of no
	// further use.
	Launch(ctx context.Context, task Task) error
}

// SessionHost is the optional ability of a prepared container to serve a
// session: many calls, one after another, each started by its init, which
// keeps what the calls started (their background processes, the kernel of
// kernel calls) until the container is removed.
type SessionHost interface {
	// OpenSession applies the session's limits, which differ from those
	// the container was prepared with, and makes the container a
	// session's. Its init waits for the first call.
	OpenSession(ctx context.Context, r Resources) (Session, error)
}

// Session is a container serving a session's calls.
type Session interface {
	// Call runs one call and waits for its end. Calls are serialized. An
	// error means the session's container is gone or broken: nothing
	// more can run in it. When ctx is done, the call is interrupted as its
	// timeout would, and Call returns once it has ended.
	Call(ctx context.Context, c Call) (CallExit, error)
}

// ProcessHost is the optional ability of a Session to run processes in
// the background, beside its calls, each started by the session's init.
type ProcessHost interface {
	// Spawn starts a background process and returns once it runs, or
	// with an error naming why it could not start (a command not found
	// is an invalid argument). It lives until it exits or the session
	// ends; a call's timeout does not end it.
	Spawn(ctx context.Context, p ProcessSpec) (Process, error)
}

// PortDialer is the optional ability of a Session to reach a port of its
// container's loopback through the session's init: how sandboxd's inbound
// proxy reaches a server in a session, on every OCI runtime, with no port
// published and nothing of the task's network used.
type PortDialer interface {
	// DialPort connects to port on the container's loopback. A refused
	// connection is an unavailable error naming the port.
	DialPort(ctx context.Context, port uint16) (net.Conn, error)
}

// Checkpointer is the optional ability of a Session to be saved whole,
// memory and all: its init, its kernel, its background processes and
// terminals, its memory-backed folders. Only gVisor can on every host
// (see docs/sessions.md): a backend or OCI runtime that cannot refuses
// with a failed precondition saying why.
type Checkpointer interface {
	// Checkpoint saves the session to dir, an empty folder on a disk,
	// between calls (a running call is a failed precondition). Without
	// leave the container ends, and the session with it: its processes
	// end with Saved set. With leave it goes on (the source of a fork).
	// It returns the background processes the checkpoint holds, which
	// Restore gives back by ID.
	Checkpoint(ctx context.Context, dir string, leave bool) ([]SavedProcess, error)
}

// SavedProcess is a background process a checkpoint holds.
type SavedProcess struct {
	ID uint32
	// Process is the handle it had in the checkpointed session.
	Process  Process
	Terminal bool
}

// Restorer is the optional ability of a Runtime to restore a checkpoint
// into a new container, as many times as asked: a pause's resume, or each
// branch of a fork.
type Restorer interface {
	// Checkpoints says why sessions under the OCI runtime name cannot be
	// checkpointed and restored here (a failed precondition), or nil.
	Checkpoints(name string) error
	// Restore makes a container from spec, which must be the spec the
	// checkpointed container was prepared from but for its ID, Labels
	// and Resources (the session's), whose processes are those saved in
	// dir. procs gives the writers of the saved background processes by
	// ID; one without writers has its output dropped.
	Restore(ctx context.Context, spec Spec, dir string, procs map[uint32]ProcessSpec) (Restored, error)
}

// Restored is a session restored from a checkpoint: its container, to
// remove when done, the session, and its background processes by ID.
type Restored struct {
	Container Container
	Session   Session
	Processes map[uint32]Process
}

// ProcessSpec is a background process to start. Argv, Env and WorkingDir
// are as in Call. Its output goes to Stdout and Stderr as it comes, from
// one goroutine at a time, until Done.
type ProcessSpec struct {
	Argv           []string
	Env            []string
	WorkingDir     string
	Stdout, Stderr io.Writer
	// Terminal, when set, gives it a pseudo-terminal of that size as its
	// stdin, stdout and stderr, and makes it the terminal's session
	// leader: its output all comes on Stdout, and the end of its stdin is
	// a Ctrl-D.
	Terminal *WindowSize
}

// WindowSize is a terminal's size, in characters.
type WindowSize struct{ Rows, Cols uint16 }

// Process is a session's background process.
type Process interface {
	// WriteStdin sends p to its stdin, in order; CloseStdin ends the
	// input. Either fails once the session is broken.
	WriteStdin(p []byte) error
	CloseStdin() error
	// Signal sends signal n to its process group; after its end, nothing.
	Signal(n int) error
	// Resize changes the size of its terminal, if it has one.
	Resize(size WindowSize) error
	// Done is closed when it has ended, or its session did, and all its
	// output was written; Exit then says how.
	Done() <-chan struct{}
	Exit() ProcessExit
}

// ProcessExit is how a background process ended.
type ProcessExit struct {
	// Code is its exit code (128+N for signal N).
	Code int
	// SessionEnded says it ended with its session's container, whose
	// end killed it: Code is then 137.
	SessionEnded bool
	// Saved says its session was checkpointed and its container ended:
	// it goes on in each restore of the checkpoint.
	Saved      bool
	FinishedAt time.Time
}

// Call is one call of a session.
type Call struct {
	// Argv, Env and WorkingDir are as in Task. For a kernel call, Argv
	// starts the session's kernel when none runs.
	Argv       []string
	Env        []string
	WorkingDir string
	// Kernel runs Code in the session's kernel rather than Argv.
	Kernel bool
	Code   string
	// Stdin is the call's whole input (for a command).
	Stdin []byte
	// Timeout, when not 0, is when the init interrupts the call: a
	// command is killed, a kernel interrupted, then killed if it goes on.
	Timeout time.Duration
	// Stdout and Stderr receive the call's output, as in Spec.
	Stdout io.Writer
	Stderr io.Writer
	// Tools serves what the call's program writes on its tool channel
	// (file descriptor ToolsFD, as in Spec) until the call ends; a kernel's
	// channel lasts as long as the kernel, and what it asks between calls
	// waits for its next call. Every call's program has a channel: with
	// Tools nil, what it asks goes unanswered.
	Tools Tools
}

// CallExit is how a call ended.
type CallExit struct {
	// Code is the program's exit code (128+N for signal N); a kernel
	// call's is 0 when its code ran without an error, 1 when not.
	Code int
	// OOMKilled says a process of the container was killed for lack of
	// memory during the call.
	OOMKilled bool
	// TimedOut and Interrupted say the call was cut short, at its timeout
	// or when its context was done.
	TimedOut, Interrupted bool
	// KernelDied says the session's kernel ended during the call; the
	// next kernel call starts a new one.
	KernelDied bool
	// ContainerExited says the session's container ended during the call
	// (under gVisor the host's OOM killer ends the whole sandbox, not one
	// process): the call ended with it, OOMKilled says whether for lack of
	// memory, and every later call of the session fails.
	ContainerExited bool
	// Reply is the kernel's reply, as it wrote it (JSON), or nil.
	Reply []byte
	// PeakMemoryBytes is the container's highest memory use so far, or 0.
	PeakMemoryBytes       int64
	StartedAt, FinishedAt time.Time
}

// Task is what Launch gives a prepared container. Start is Prepare and
// Launch of the task of its spec.
type Task struct {
	Argv []string
	// Compile, when set, builds the program before Argv runs, under the
	// same user, environment and limits; when it fails Argv never runs
	// and the Exit says so.
	Compile    []string
	Env        []string
	WorkingDir string
	// Prestarted runs Argv, which is [interpreter, file, args...], in the
	// interpreter the container pre-started (Spec.Prestart), rather than
	// as a new process; Compile must be empty. Without it, a pre-started
	// interpreter is ended before the program starts.
	Prestarted bool
	// Resources are the task's limits.
	Resources Resources
	// Stdin, Stdout, Stderr and Tools are as in Spec.
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Tools  Tools
}

// Task is the task of a container made for it.
func (s Spec) Task() Task {
	return Task{
		Argv: s.Argv, Compile: s.Compile, Env: s.Env, WorkingDir: s.WorkingDir, Prestarted: s.Prestart != nil, Resources: s.Resources,
		Stdin: s.Stdin, Stdout: s.Stdout, Stderr: s.Stderr, Tools: s.Tools,
	}
}

// Container is one started container.
type Container interface {
	// ID is the backend's name for the container.
	ID() string
	// Wait blocks until the program has ended and all of its output has
	// been copied, or ctx is done. The init's exit report (see
	// internal/sandbox/launch) ends the wait as soon as it has arrived, when the
	// cgroup shows no OOM kill; otherwise it lasts until the backend saw the
	// container exit. A container is removed with Remove either way.
	Wait(ctx context.Context) (Exit, error)
	// Kill kills every process of the container at once (SIGKILL).
	Kill(ctx context.Context) error
	// Remove deletes the container and what the backend created for it. It
	// kills the container first if it still runs.
	Remove(ctx context.Context) error
}

// Spec describes one container.
type Spec struct {
	// ID is unique per task; the backend derives the container's name from it.
	ID string
	// Image is an image ID as returned by Runtime.Image.
	Image string
	// Runtime names the OCI runtime: "runc", "crun" or "runsc". Empty
	// means the backend's default.
	Runtime string
	// Argv is the command; Argv[0] is looked up in the image's PATH.
	Argv []string
	// Compile is as in Task.
	Compile []string
	// Prestart, when set, is an interpreter that the init starts as soon
	// as the container is, as the program's user, in WorkingDir with Env,
	// before its task is known; the task runs in it (Task.Prestarted).
	// Start runs the spec's Argv in it.
	Prestart *Prestart
	// Env holds KEY=VALUE pairs; it replaces the image's environment.
	Env []string
	// WorkingDir is an absolute path in the container.
	WorkingDir string
	// User is "UID:GID", numeric and not 0.
	User string
	// Hostname is the container's host name.
	Hostname string
	// Labels are set on the container.
	Labels map[string]string
	// Mounts are host folders bound into the container.
	Mounts []Mount
	// Tmpfs are memory-backed folders of a fixed size.
	Tmpfs []Tmpfs
	// ControlDir, when set, is an empty host folder, root's and mode
	// 0700, through which a session's calls can bypass the backend where
	// the runtime allows it (see launch.ControlSocket).
	ControlDir string
	// Resources are the container's limits.
	Resources Resources
	// Egress, when valid, is the container's address on the egress
	// gateway's subnet (from the gateway's Allocate): the container gets
	// one interface besides loopback, its link to the gateway, whose
	// address is its only route. Backends without a gateway refuse it.
	Egress netip.Addr
	// Stdin, when not nil, is copied to the program's standard input, which
	// is closed at its end. When nil, stdin is at end of file.
	Stdin io.Reader
	// Stdout and Stderr receive the program's output. Each is written from
	// one goroutine at a time; a Write must not keep the slice.
	Stdout io.Writer
	Stderr io.Writer
	// Tools, when not nil, gives the program a tool channel: a socket,
	// file descriptor ToolsFD, whose bytes the backend passes to and from
	// Tools.Serve, never over the task's network. Not with Prestart.
	Tools Tools
}

// ToolsFD is the file descriptor of a program's tool channel.
const ToolsFD = 3

// Tools serves a program's tool channel (see docs/tools.md).
type Tools interface {
	// Serve reads what the program writes on its channel from requests
	// until it ends, which it does once the program has, and writes the
	// answers to answers. Each Write to answers is passed on whole.
	Serve(requests io.Reader, answers io.Writer)
}

// Prestart is an interpreter started ahead of its program, with Modules
// loaded, waiting for the program's file, argv, environment and working
// directory (see docs/prestart.md for what a program can tell).
type Prestart struct {
	// Language is "python" or "javascript"; Interpreter is its command,
	// e.g. "python3".
	Language    string
	Interpreter string
	Modules     []string
}

// PrestartLanguages are the languages whose interpreter a container can
// pre-start.
var PrestartLanguages = []string{"python", "javascript"}

// Mount binds a host folder into a container. Submounts of Source are not
// carried along.
type Mount struct {
	Source   string
	Target   string
	ReadOnly bool
}

// Tmpfs is a memory-backed folder, writable by everyone, without setuid or
// device files.
type Tmpfs struct {
	Target    string
	SizeBytes int64
}

// Resources are the limits of one container.
type Resources struct {
	MemoryBytes int64
	CPUMillis   int64
	Pids        int64
	NoFile      int64
}

// EgressGateway makes the links between containers and sandboxd's egress
// gateway (netpolicy/gateway); backends that can give containers an
// interface are configured with one.
type EgressGateway interface {
	// Addr is the gateway's address, every linked container's route; Subnet
	// is where the containers' addresses are.
	Addr() netip.Addr
	Subnet() netip.Prefix
	// Attach makes the link of a container's address; its container end
	// waits in the host's namespace for the backend, or Configure, to move
	// it into the container's.
	Attach(addr netip.Addr) (EgressLink, error)
	// Configure moves a link into the network namespace at nsPath and
	// makes it eth0 with its address and route.
	Configure(l EgressLink, nsPath string) error
	// Detach removes the link of addr, if any.
	Detach(addr netip.Addr) error
}

// EgressLink is a container's end of its link to the egress gateway.
type EgressLink struct {
	// Name is the interface, in the host's namespace until moved.
	Name string
	// Addr is the container's address with the subnet's length.
	Addr netip.Prefix
	// Gateway is the container's route, DNS server and proxy.
	Gateway netip.Addr
}

// RuncName is the name of runc, the OCI runtime of the Open Container
// Initiative.
const RuncName = "runc"

// RunscName is the name of gVisor's OCI runtime.
const RunscName = "runsc"

// CrunName is the name of crun, the OCI runtime in C that does what runc
// does with less work per container.
const CrunName = "crun"

// Exit is how a container ended.
type Exit struct {
	// Code is the exit code of the container's program; 128+N when killed
	// by signal N. When CompileFailed, it is the compile step's, and the
	// program never ran.
	Code          int
	CompileFailed bool
	// OOMKilled says the kernel killed a process of the container for
	// lack of memory.
	OOMKilled bool
	// PeakMemoryBytes is the highest memory use, or 0 when unknown.
	PeakMemoryBytes int64
	// StartedAt is when the program started: the container's start, or
	// the Launch of a prepared container. FinishedAt is when it exited.
	StartedAt  time.Time
	FinishedAt time.Time
}

// Info describes a backend.
type Info struct {
	// Backend names it: "docker", "containerd".
	Backend string
	// Version is the backend's version.
	Version string
	// Runtimes are the OCI runtimes the backend can use, by name.
	Runtimes []OCIRuntime
	// DefaultRuntime names the runtime used when a Spec names none.
	DefaultRuntime string
	// CPUs and MemoryBytes are its host's, or 0 when unknown: no
	// container can have more.
	CPUs        int
	MemoryBytes int64
}

// OCIRuntime is one OCI runtime a backend can use.
type OCIRuntime struct {
	Name    string
	Version string
	// Seccomp names the seccomp profile its containers get, by digest.
	Seccomp string
}

// Image is an image present in a backend.
type Image struct {
	// ID is the image's content digest, "sha256:...".
	ID string
	// Ref is the reference it was found by.
	Ref string
	// Labels are the image's labels.
	Labels map[string]string
	// Volumes are the paths the image declares as volumes.
	Volumes []string
	// Env is the environment the image declares (KEY=VALUE).
	Env []string
}
