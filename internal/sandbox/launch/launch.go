// Package launch is what passes between sandboxd and the init of its
// containers (cmd/sandboxd-init). Every container is created and started
// with the init waiting on its stdin, ahead of time for the warm pool or
// when its task comes; sandboxd writes the task's Spec there, followed by
// the task's own stdin, and the init starts the program on the streams
// attached at creation. Nothing is ever started in a container from
// outside, before or after. When the program ends, the init says so on
// its output streams (see Report).
//
// The message is a 4-byte big-endian length and that many bytes of JSON.
package launch

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// MaxBytes bounds a message.
const MaxBytes = 4 << 20

// Spec is what the init needs to start the program.
type Spec struct {
	// Argv is the program; Argv[0] is looked up in Env's PATH.
	Argv []string `json:"argv"`
	// Compile, when set, runs first, the same way but with its output on
	// stderr and no stdin; when it fails, Argv never runs and the report
	// says so (RunEnd).
	Compile []string `json:"compile,omitempty"`
	// Env replaces the init's environment.
	Env []string `json:"env"`
	// Dir is the working directory.
	Dir string `json:"dir"`
	// UID and GID are the program's user and group, never root's: the
	// init, root of the container, starts it under them, in no other
	// group, so that the program can neither signal nor trace the init.
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// Nproc, when not 0, is set as RLIMIT_NPROC before the program starts
	// (how runsc enforces the pids limit; see runtime.PidsLimits).
	Nproc int64 `json:"nproc,omitempty"`
	// Report, when set, is the token of the exit report the init writes
	// when the program has ended (see Report).
	Report string `json:"report,omitempty"`
	// Hold, with Report, keeps the container after the report until
	// sandboxd makes ControlRelease, where the control folder is bound,
	// or sends the init SIGTERM (see HoldBound): the backend's work at a
	// container's exit then comes after sandboxd has kept the run, not
	// beside it. Not after an exit by SIGKILL, which only the backend can
	// tell from an OOM kill: the init then exits at once.
	Hold bool `json:"hold,omitempty"`

	// Prestart makes this message, the first of a pooled container, start
	// Argv ahead of its task: a pre-started interpreter (see Prestarter),
	// which waits for its program. The task's message comes next.
	Prestart bool `json:"prestart,omitempty"`
	// Prestarted, in the task's message, runs the program in the waiting
	// interpreter, which must have been started with the same UID, GID
	// and Nproc; without it a waiting interpreter is killed and the
	// program starts afresh.
	Prestarted bool `json:"prestarted,omitempty"`
	// Tools gives the program a tool channel (see ToolsFD). In a single
	// run, the input after this message and the init's stdout are then in
	// frames; not with Prestarted. On a session's first message, every
	// process of every call gets the channel, and the init writes all of
	// the session's output in frames, as it does on the control
	// connection; the answers come as Answer messages.
	Tools bool `json:"tools,omitempty"`

	// Session makes the init serve a session (see SessionMessages): after
	// this call it waits for the next message instead of ending the
	// container. Only the first message of a container says so.
	Session bool `json:"session,omitempty"`
	// StdinBytes is how many bytes of the call's stdin follow a session
	// call's message; a session's stdin carries every call.
	StdinBytes int64 `json:"stdin_bytes,omitempty"`
	// TimeoutMillis, for a session call, is when the init interrupts it:
	// the kernel by SIGINT, then by SIGKILL after InterruptGrace; a
	// command's process group by SIGKILL.
	TimeoutMillis int64 `json:"timeout_ms,omitempty"`
	// Kernel, for a session call, runs Code in the session's kernel (see
	// Kernel) instead of starting Argv; Argv starts the kernel when the
	// session has none running.
	Kernel bool   `json:"kernel,omitempty"`
	Code   string `json:"code,omitempty"`
	// Interrupt is not a call: it asks the init to interrupt the running
	// call, as its timeout would.
	Interrupt bool `json:"interrupt,omitempty"`
	// Answer is not a call either: bytes for the session's tool channel,
	// answers to what the running call asked.
	Answer []byte `json:"answer,omitempty"`
	// Process, when not 0, makes the message one about the session's
	// background process of that number rather than a call (see
	// FrameProcess): with Argv, it starts the process, with Env, Dir,
	// UID, GID and Nproc as a call's; without, it writes Input to the
	// process's stdin, then closes it with InputEnd, sends Signal to its
	// process group, and gives its terminal the size Resize.
	Process  uint32      `json:"process,omitempty"`
	Input    []byte      `json:"input,omitempty"`
	InputEnd bool        `json:"input_end,omitempty"`
	Signal   int         `json:"signal,omitempty"`
	Resize   *WindowSize `json:"resize,omitempty"`
	// Terminal, on a background process's start, gives it a terminal of
	// that size for its stdin, stdout and stderr, and makes it the
	// terminal's session leader; its output is all on stdout.
	Terminal *WindowSize `json:"terminal,omitempty"`
	// Port, without Argv, makes the start a connection's rather than a
	// process's: the init connects to that port of the container's
	// loopback, and relays it as a process's streams (see
	// FrameProcess), its input as Input, the end of it as InputEnd (a
	// half-close); Close closes it. It reaches no other address.
	Port  uint16 `json:"port,omitempty"`
	Close bool   `json:"close,omitempty"`
	// Quiesce, between calls, asks the init to hold the session's output
	// for a checkpoint: it writes a ProcessState of process 0 with Held,
	// the last frame before the checkpoint, and writes nothing more until
	// Resume, the first message after it (in the container checkpointed
	// and left running, and in each restore), after which it writes a
	// ProcessState of process 0 with Resumed. The frames then never break
	// at the checkpoint: a restore's output starts on a frame. Quiesce
	// may open a session (with Session, UID, GID and Dir).
	Quiesce bool `json:"quiesce,omitempty"`
	Resume  bool `json:"resume,omitempty"`
	// Control, on a session's first message, is the token with which the
	// init opens the control connection (see ControlSocket) that carries
	// the session's later messages and all its output.
	Control string `json:"control,omitempty"`
}

// WindowSize is a terminal's size, in characters.
type WindowSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// maxSignal is the highest signal number Linux has (SIGRTMAX).
const maxSignal = 64

// HoldBound is how long a holding init waits to be let go: sandboxd lets
// it go well before, unless sandboxd has gone.
const HoldBound = 10 * time.Second

// InterruptGrace is how long a kernel has to stop after SIGINT before it
// is killed.
const InterruptGrace = 2 * time.Second

// CallEnd is what the init reports of a session call besides its exit
// code, as the data of its exit report (see DataLine).
type CallEnd struct {
	// TimedOut and Interrupted say the init cut the call short, at its
	// timeout or when asked.
	TimedOut    bool `json:"timed_out,omitempty"`
	Interrupted bool `json:"interrupted,omitempty"`
	// KernelDied says the kernel ended during the call (killed, out of
	// memory, or exited); the next kernel call starts a fresh one.
	KernelDied bool `json:"kernel_died,omitempty"`
	// Reply is the kernel's reply to the call, as it wrote it.
	Reply json.RawMessage `json:"reply,omitempty"`
}

// RunEnd is what the init reports of a single run besides its exit code,
// as the data of its exit report (see DataLine), when there is more to
// say.
type RunEnd struct {
	// CompileFailed says the exit code is the compile step's: the
	// program was never started.
	CompileFailed bool `json:"compile_failed,omitempty"`
}

// Write sends s on w.
func Write(w io.Writer, s Spec) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if len(b) > MaxBytes {
		return fmt.Errorf("launch message of %d bytes is over %d", len(b), MaxBytes)
	}
	msg := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b)))
	_, err = w.Write(append(msg, b...))
	return err
}

// Input is what a waiting init reads on its stdin: the message of s, then
// the program's stdin, if it has one.
func Input(s Spec, stdin io.Reader) (io.Reader, error) {
	var msg bytes.Buffer
	if err := Write(&msg, s); err != nil {
		return nil, err
	}
	if stdin == nil {
		return &msg, nil
	}
	return io.MultiReader(&msg, stdin), nil
}

// Read reads exactly one message from r, and not a byte more: what follows
// is the program's stdin.
func Read(r io.Reader) (Spec, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return Spec{}, fmt.Errorf("launch message: %w", err)
	}
	n := binary.BigEndian.Uint32(head[:])
	if n > MaxBytes {
		return Spec{}, fmt.Errorf("launch message of %d bytes is over %d", n, MaxBytes)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return Spec{}, fmt.Errorf("launch message: %w", err)
	}
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return Spec{}, fmt.Errorf("launch message: %w", err)
	}
	starts := s.Process == 0 || s.Input == nil && !s.InputEnd && s.Signal == 0 && s.Resize == nil && !s.Close
	if !s.Interrupt && !s.Quiesce && !s.Resume && s.Answer == nil && starts && s.Port == 0 && (len(s.Argv) == 0 || s.Argv[0] == "") {
		return Spec{}, errors.New("launch message: no program")
	}
	if s.Process != 0 && !starts && (len(s.Argv) > 0 || s.Port != 0) {
		return Spec{}, fmt.Errorf("launch message: process %d is started with no input or signal", s.Process)
	}
	if s.Port != 0 && (s.Process == 0 || len(s.Argv) > 0) {
		return Spec{}, errors.New("launch message: a port is a connection's, numbered as a process, with no program")
	}
	if s.Signal < 0 || s.Signal > maxSignal {
		return Spec{}, fmt.Errorf("launch message: signal %d is out of range", s.Signal)
	}
	if s.StdinBytes < 0 || s.StdinBytes > MaxBytes {
		return Spec{}, fmt.Errorf("launch message: stdin of %d bytes is out of range", s.StdinBytes)
	}
	return s, nil
}
