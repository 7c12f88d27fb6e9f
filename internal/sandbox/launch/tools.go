package launch

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// A run with a tool channel (Spec.Tools) gives its program a socket, file
// descriptor ToolsFD, on which it writes requests to sandboxd and reads
// the answers (see docs/tools.md). The init relays the socket's bytes as
// they are, parsing nothing of them. It is the only writer of its stdout
// then: the program's stdout and stderr come to it through pipes, and it
// writes them, and what the program wrote on the socket, as frames on its
// stdout (FrameStdout, FrameStderr, FrameCall), then the exit report as
// usual on both streams. sandboxd writes frames after the launch
// message: the program's stdin (FrameStdin; an empty one is its end) and
// the answers (FrameAnswer). The channel never touches the network: a
// task without any can call tools.

// ToolsFD is the program's end of its tool channel.
const ToolsFD = 3

// Streams of the frames that carry a tool channel's bytes.
const (
	FrameCall   byte = 3 // the program's requests, to sandboxd
	FrameStdin  byte = 4 // the program's stdin, from sandboxd
	FrameAnswer byte = 5 // the answers, from sandboxd
)

// WriteFrame writes data as one frame of stream on w, in one write.
func WriteFrame(w io.Writer, stream byte, data []byte) error {
	if len(data) > MaxFrameBytes {
		return fmt.Errorf("frame of %d bytes is over %d", len(data), MaxFrameBytes)
	}
	b := make([]byte, frameHeader, frameHeader+len(data))
	b[0] = stream
	binary.BigEndian.PutUint32(b[1:], uint32(len(data)))
	_, err := w.Write(append(b, data...))
	return err
}

// ReadFrame reads one frame from r into buf, which must hold
// MaxFrameBytes, and returns its stream and data. io.EOF means r ended
// between frames.
func ReadFrame(r *bufio.Reader, buf []byte) (byte, []byte, error) {
	var head [frameHeader]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, nil, io.EOF
		}
		return 0, nil, fmt.Errorf("frame: %w", err)
	}
	n := binary.BigEndian.Uint32(head[1:])
	if n > MaxFrameBytes {
		return 0, nil, fmt.Errorf("frame of %d bytes is over %d", n, MaxFrameBytes)
	}
	if _, err := io.ReadFull(r, buf[:n]); err != nil {
		return 0, nil, fmt.Errorf("frame: %w", err)
	}
	return head[0], buf[:n], nil
}

// Deframer is what sandboxd copies the stdout of a run with a tool
// channel to (after its Report has taken the report out), and a session's
// output (before its calls' reports do): it takes the frames apart as they
// come, in pieces of any size, and passes each stream's data on. Bytes
// that are not a frame are an error, and what follows them is dropped.
type Deframer struct {
	stdout, stderr, calls io.Writer
	processes             ProcessSink
	whole                 []byte // a background process's frame so far

	head [frameHeader]byte
	have int    // bytes of head read
	left uint32 // data bytes of the current frame still to come
	err  error
}

// NewDeframer passes the program's stdout, stderr and tool requests on to
// the three writers.
func NewDeframer(stdout, stderr, calls io.Writer) *Deframer {
	return &Deframer{stdout: stdout, stderr: stderr, calls: calls}
}

// WithProcesses passes the frames of a session's background processes
// on to sink; without it they are an error.
func (d *Deframer) WithProcesses(sink ProcessSink) *Deframer {
	d.processes = sink
	return d
}

// Write never fails, so that the copy feeding it goes on to the report;
// Err says what went wrong.
func (d *Deframer) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 && d.err == nil {
		if d.left == 0 {
			k := copy(d.head[d.have:], p)
			d.have += k
			p = p[k:]
			if d.have < frameHeader {
				break
			}
			d.have = 0
			d.left = binary.BigEndian.Uint32(d.head[1:])
			if d.left > MaxFrameBytes || d.to() == nil && !d.process() {
				d.err = fmt.Errorf("output frame of stream %d and %d bytes", d.head[0], d.left)
			}
			if d.process() {
				d.whole = d.whole[:0]
				if d.left == 0 {
					d.err = processFrame(d.processes, d.head[0], nil)
				}
			}
			continue
		}
		k := min(uint32(len(p)), d.left)
		if d.process() {
			d.whole = append(d.whole, p[:k]...)
			if d.left -= k; d.left == 0 {
				d.err = processFrame(d.processes, d.head[0], d.whole)
			}
			p = p[k:]
			continue
		}
		// A writer that fails (a closed call pipe) drops its stream's
		// data: the other streams go on.
		_, _ = d.to().Write(p[:k])
		d.left -= k
		p = p[k:]
	}
	return n, nil
}

// process says the frame is a background process's, whole frames of
// which go to the sink.
func (d *Deframer) process() bool {
	return d.processes != nil && (d.head[0] == FrameProcess || d.head[0] == FrameProcessState)
}

func (d *Deframer) to() io.Writer {
	switch d.head[0] {
	case FrameStdout:
		return d.stdout
	case FrameStderr:
		return d.stderr
	case FrameCall:
		return d.calls
	}
	return nil
}

// CopyFrom copies r into d until r ends, or until what it carries is not
// a frame: how a session's output, all in frames, is read (see
// ControlSocket). The end of r inside a frame is an error too.
func (d *Deframer) CopyFrom(r io.Reader) error {
	buf := make([]byte, MaxFrameBytes)
	for {
		n, err := r.Read(buf)
		d.Write(buf[:n])
		switch {
		case d.err != nil:
			return d.err
		case errors.Is(err, io.EOF) && d.Partial():
			return errors.New("the output ended inside a frame")
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return err
		}
	}
}

// Err is the first framing error, or nil.
func (d *Deframer) Err() error { return d.err }

// Partial says the stream ended inside a frame.
func (d *Deframer) Partial() bool { return d.have > 0 || d.left > 0 }

// FrameInput is the input of a run with a tool channel after its launch
// message: the program's stdin and the answers, each in frames, written
// from several goroutines.
type FrameInput struct {
	mu sync.Mutex
	w  io.Writer
}

// NewFrameInput writes frames on w.
func NewFrameInput(w io.Writer) *FrameInput { return &FrameInput{w: w} }

// CopyStdin sends what r holds as the program's stdin, then its end.
func (in *FrameInput) CopyStdin(r io.Reader) error {
	buf := make([]byte, MaxFrameBytes)
	for r != nil {
		n, err := r.Read(buf)
		if n > 0 {
			if err := in.send(FrameStdin, buf[:n]); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	return in.send(FrameStdin, nil)
}

// Answers is where the program's answers are written: each Write is sent
// in frames, whole, before another.
func (in *FrameInput) Answers() io.Writer { return answerWriter{in} }

type answerWriter struct{ in *FrameInput }

func (a answerWriter) Write(p []byte) (int, error) {
	a.in.mu.Lock()
	defer a.in.mu.Unlock()
	for n := 0; n < len(p); n += MaxFrameBytes {
		if err := WriteFrame(a.in.w, FrameAnswer, p[n:min(len(p), n+MaxFrameBytes)]); err != nil {
			return n, err
		}
	}
	return len(p), nil
}

func (in *FrameInput) send(stream byte, data []byte) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return WriteFrame(in.w, stream, data)
}

// NewRelayWriters returns the writers of the frames of a run with a tool
// channel on w: the program's stdout, its stderr and its requests.
func NewRelayWriters(w io.Writer) (stdout, stderr, calls *FrameWriter) {
	stdout, stderr = NewFrameWriters(w)
	return stdout, stderr, &FrameWriter{stdout.mu, w, FrameCall}
}
