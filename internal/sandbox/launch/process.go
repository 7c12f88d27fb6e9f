package launch

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
)

// A session's init runs processes in the background, beside its calls
// (Spec.Process): each has a number sandboxd gives it, lives until it
// exits or the session ends, and has stdin, stdout and stderr of its own.
// Its output comes in FrameProcess frames among the session's other
// frames, what becomes of it (started, exited) in one FrameProcessState
// frame each; its stdin and signals go to it as messages. No call's
// report waits for them, and nothing they write reaches a call's output.

// Streams of the frames of background processes.
const (
	// FrameProcess carries output: the process's number (4 bytes,
	// big-endian), the stream (FrameStdout or FrameStderr), the bytes.
	FrameProcess byte = 6
	// FrameProcessState carries the number and a ProcessState as JSON.
	FrameProcessState byte = 7
)

// processHeader is the number and stream ahead of a FrameProcess's bytes.
const processHeader = 5

// MaxProcessChunk is the most output one FrameProcess carries.
const MaxProcessChunk = MaxFrameBytes - processHeader

// ProcessState is what became of a background process: it started, or it
// ended (Exited, with Code as a shell's, 128+N for signal N), or it never
// started (Error says why).
type ProcessState struct {
	Started bool   `json:"started,omitempty"`
	Exited  bool   `json:"exited,omitempty"`
	Code    int    `json:"code,omitempty"`
	Error   string `json:"error,omitempty"`
	// Held, of process 0, says the init holds its output (Spec.Quiesce);
	// Resumed that it writes again (Spec.Resume): in a restore, that the
	// restore is complete.
	Held    bool `json:"held,omitempty"`
	Resumed bool `json:"resumed,omitempty"`
}

// ProcessSink takes the frames of background processes, each whole.
type ProcessSink interface {
	ProcessOutput(n uint32, stream byte, data []byte)
	ProcessState(n uint32, st ProcessState)
}

// WriteProcessOutput writes data, at most MaxProcessChunk bytes, as the
// output of process n on stream.
func (f *FrameWriter) WriteProcessOutput(n uint32, stream byte, data []byte) error {
	b := make([]byte, processHeader, processHeader+len(data))
	binary.BigEndian.PutUint32(b, n)
	b[4] = stream
	return f.WriteFrame(FrameProcess, append(b, data...))
}

// WriteProcessState writes st as the state of process n.
func (f *FrameWriter) WriteProcessState(n uint32, st ProcessState) error {
	js, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return f.WriteFrame(FrameProcessState, append(binary.BigEndian.AppendUint32(nil, n), js...))
}

// WriteFrame writes one frame of stream on the connection f shares with
// the other writers.
func (f *FrameWriter) WriteFrame(stream byte, data []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return WriteFrame(f.w, stream, data)
}

// Hold writes the Held state of process 0 and keeps every writer that
// shares f's connection from writing until Release (Spec.Quiesce): each
// frame before it is whole on the connection, and nothing follows it.
func (f *FrameWriter) Hold() error {
	js, err := json.Marshal(ProcessState{Held: true})
	if err != nil {
		return err
	}
	f.mu.Lock()
	return WriteFrame(f.w, FrameProcessState, append(binary.BigEndian.AppendUint32(nil, 0), js...))
}

// Release lets the writers write again after Hold.
func (f *FrameWriter) Release() { f.mu.Unlock() }

// processFrame passes a whole frame of a background process to sink.
func processFrame(sink ProcessSink, stream byte, data []byte) error {
	if len(data) < 4 {
		return fmt.Errorf("frame of stream %d without a process number", stream)
	}
	n := binary.BigEndian.Uint32(data)
	switch stream {
	case FrameProcess:
		if len(data) < processHeader || data[4] != FrameStdout && data[4] != FrameStderr {
			return fmt.Errorf("output frame of process %d without a stream", n)
		}
		sink.ProcessOutput(n, data[4], data[processHeader:])
	default:
		var st ProcessState
		if err := json.Unmarshal(data[4:], &st); err != nil {
			return fmt.Errorf("state of process %d: %w", n, err)
		}
		sink.ProcessState(n, st)
	}
	return nil
}
