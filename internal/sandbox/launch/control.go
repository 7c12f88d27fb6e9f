package launch

import (
	"encoding/binary"
	"io"
	"sync"
)

// A session's messages and output can bypass the backend. Each hop of its
// attach (Docker's or containerd's daemon, the shim and their pipes) costs a wake-up of
// another process on every call, milliseconds in all on a busy host. Where
// the runtime lets a container reach a host socket (runc does; gVisor
// does not without --host-uds), sandboxd binds a folder of the host,
// 0700 and root's, read-only at ControlDir, listens on ControlSocket when the
// session's first call comes, and names a token in that call's message.
// The init connects, sends the token and a newline, and from then on
// reads the session's messages from the connection, as it read the first
// from its stdin, and writes the calls' output to it in frames. sandboxd
// takes one connection and unlinks the socket: nothing else can connect,
// and the program, under another user, cannot reach the folder anyway.

// ControlDir and ControlSocket are where the init finds the socket.
// ControlRelease, made by sandboxd, lets an init that holds its container
// go (see Spec.Hold) without the OCI runtime's kill, a process per task.
const (
	ControlDir     = "/.sandboxd/control"
	ControlSocket  = ControlDir + "/socket"
	ControlRelease = ControlDir + "/release"
)

// Streams of an output frame.
const (
	FrameStdout byte = 1
	FrameStderr byte = 2
)

// MaxFrameBytes bounds the data of one frame.
const MaxFrameBytes = 64 << 10

// frameHeader is a frame's stream byte and its data's 4-byte big-endian
// length.
const frameHeader = 5

// FrameWriter writes what is written to it as frames of one stream on a
// connection that several FrameWriters share.
type FrameWriter struct {
	mu     *sync.Mutex
	w      io.Writer
	stream byte
}

// NewFrameWriters returns the writers of stdout and stderr frames on w.
func NewFrameWriters(w io.Writer) (stdout, stderr *FrameWriter) {
	mu := &sync.Mutex{}
	return &FrameWriter{mu, w, FrameStdout}, &FrameWriter{mu, w, FrameStderr}
}

// Write writes p in frames, each in one write.
func (f *FrameWriter) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), MaxFrameBytes)]
		b := make([]byte, frameHeader, frameHeader+len(chunk))
		b[0] = f.stream
		binary.BigEndian.PutUint32(b[1:], uint32(len(chunk)))
		if _, err := f.w.Write(append(b, chunk...)); err != nil {
			return n, err
		}
		n += len(chunk)
		p = p[len(chunk):]
	}
	return n, nil
}
