package launch

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testutil"
)

// processSink records what the deframer passes on.
type processSink struct {
	out    []string
	states []ProcessState
}

func (s *processSink) ProcessOutput(n uint32, stream byte, data []byte) {
	s.out = append(s.out, string(rune('0'+n))+string(rune('0'+stream))+":"+string(data))
}

func (s *processSink) ProcessState(n uint32, st ProcessState) { s.states = append(s.states, st) }

// TestProcessFramesComeWholeAmongTheOthers: the frames of background
// processes, cut anywhere on the way, reach the sink whole, in order,
// beside a call's stdout.
func TestProcessFramesComeWholeAmongTheOthers(t *testing.T) {
	var wire bytes.Buffer
	stdout, _ := NewFrameWriters(&wire)
	stdout.WriteProcessState(1, ProcessState{Started: true})
	stdout.WriteProcessOutput(1, FrameStdout, []byte("server up"))
	stdout.Write([]byte("the call's"))
	stdout.WriteProcessOutput(2, FrameStderr, []byte("oops"))
	stdout.WriteProcessState(1, ProcessState{Exited: true, Code: 143})
	var callOut, callErr bytes.Buffer
	sink := &processSink{}
	d := NewDeframer(&callOut, &callErr, nil).WithProcesses(sink)
	for _, b := range wire.Bytes() {
		d.Write([]byte{b})
	}
	if d.Err() != nil || d.Partial() {
		t.Fatalf("deframer: %v, partial %v", d.Err(), d.Partial())
	}
	if want := []string{"11:server up", "22:oops"}; !slices.Equal(sink.out, want) {
		t.Errorf("process output %q, want %q", sink.out, want)
	}
	if want := []ProcessState{{Started: true}, {Exited: true, Code: 143}}; !slices.Equal(sink.states, want) {
		t.Errorf("process states %+v, want %+v", sink.states, want)
	}
	if callOut.String() != "the call's" {
		t.Errorf("the call's stdout %q", callOut.String())
	}
}

// TestProcessFramesNeedASink: without one, or without a number, they are
// what is not a frame.
func TestProcessFramesNeedASink(t *testing.T) {
	var wire bytes.Buffer
	stdout, _ := NewFrameWriters(&wire)
	stdout.WriteProcessOutput(1, FrameStdout, []byte("x"))
	d := NewDeframer(&bytes.Buffer{}, &bytes.Buffer{}, nil)
	d.Write(wire.Bytes())
	if d.Err() == nil {
		t.Error("a process frame without a sink was taken")
	}
	wire.Reset()
	WriteFrame(&wire, FrameProcess, []byte{0, 0})
	d = NewDeframer(&bytes.Buffer{}, &bytes.Buffer{}, nil).WithProcesses(&processSink{})
	d.Write(wire.Bytes())
	if d.Err() == nil {
		t.Error("a process frame without a number was taken")
	}
}

func TestReadTellsProcessMessagesApart(t *testing.T) {
	for _, tt := range []struct {
		name string
		spec Spec
		ok   bool
	}{
		{"a start", Spec{Process: 1, Argv: []string{"sleep", "9"}}, true},
		{"input", Spec{Process: 1, Input: []byte("x")}, true},
		{"the end of the input", Spec{Process: 1, InputEnd: true}, true},
		{"a signal", Spec{Process: 1, Signal: 15}, true},
		{"a resize", Spec{Process: 1, Resize: &WindowSize{Rows: 30, Cols: 100}}, true},
		{"a start with a terminal", Spec{Process: 1, Argv: []string{"bash"}, Terminal: &WindowSize{Rows: 24, Cols: 80}}, true},
		{"a connection", Spec{Process: 2, Port: 8000}, true},
		{"a connection's close", Spec{Process: 2, Close: true}, true},
		{"a connection with a program", Spec{Process: 2, Port: 8000, Argv: []string{"nc"}}, false},
		{"a port outside a process", Spec{Port: 8000, Argv: []string{"nc"}}, false},
		{"a start with a resize", Spec{Process: 1, Argv: []string{"bash"}, Resize: &WindowSize{Rows: 24, Cols: 80}}, false},
		{"a start with input", Spec{Process: 1, Argv: []string{"cat"}, Input: []byte("x")}, false},
		{"neither", Spec{Process: 1}, false},
		{"a signal out of range", Spec{Process: 1, Signal: 65}, false},
	} {
		in, err := Input(tt.spec, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Read(in); (err == nil) != tt.ok {
			t.Errorf("%s: Read() = %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}

// TestHoldIsTheLastFrameUntilRelease: Hold writes the held state of
// process 0, and no writer sharing the connection writes until Release;
// the quiesce and resume messages that ask for it read as messages.
func TestHoldIsTheLastFrameUntilRelease(t *testing.T) {
	var wire testutil.Buffer
	stdout, stderr := NewFrameWriters(&wire)
	stdout.WriteProcessOutput(1, FrameStdout, []byte("before"))
	if err := stdout.Hold(); err != nil {
		t.Fatal(err)
	}
	wrote := make(chan struct{})
	go func() {
		stderr.Write([]byte("after"))
		close(wrote)
	}()
	select {
	case <-wrote:
		t.Fatal("a writer wrote while the output was held")
	case <-time.After(50 * time.Millisecond):
	}
	sink := &processSink{}
	d := NewDeframer(&bytes.Buffer{}, &bytes.Buffer{}, nil).WithProcesses(sink)
	d.Write([]byte(wire.String()))
	if d.Err() != nil || d.Partial() || len(sink.states) != 1 || !sink.states[0].Held {
		t.Fatalf("held output: %v, partial %v, states %+v", d.Err(), d.Partial(), sink.states)
	}
	stdout.Release()
	<-wrote
	for _, m := range []Spec{{Quiesce: true}, {Resume: true}} {
		var b bytes.Buffer
		if err := Write(&b, m); err != nil {
			t.Fatal(err)
		}
		if got, err := Read(&b); err != nil || got.Quiesce != m.Quiesce || got.Resume != m.Resume {
			t.Errorf("Read(%+v) = %+v, %v", m, got, err)
		}
	}
}
