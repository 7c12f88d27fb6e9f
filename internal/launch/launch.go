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
)

// MaxBytes bounds a message.
const MaxBytes = 4 << 20

// Spec is what the init needs to start the program.
type Spec struct {
	// Argv is the program; Argv[0] is looked up in Env's PATH.
	Argv []string `json:"argv"`
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
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		return Spec{}, errors.New("launch message: no program")
	}
	return s, nil
}
