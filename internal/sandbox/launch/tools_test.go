package launch

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
)

// TestDeframerTakesFramesInPiecesOfAnySize writes the frames of three
// streams one byte at a time, and at once: each stream gets its own.
func TestDeframerTakesFramesInPiecesOfAnySize(t *testing.T) {
	var wire bytes.Buffer
	stdout, stderr, calls := NewRelayWriters(&wire)
	stdout.Write([]byte("out 1 "))
	calls.Write([]byte(`{"id":1}` + "\n"))
	stderr.Write([]byte("err"))
	stdout.Write(bytes.Repeat([]byte("x"), MaxFrameBytes+3))
	for _, piece := range []int{1, 7, wire.Len()} {
		var out, errOut, req bytes.Buffer
		d := NewDeframer(&out, &errOut, &req)
		b := wire.Bytes()
		for len(b) > 0 {
			n := min(piece, len(b))
			d.Write(b[:n])
			b = b[n:]
		}
		if d.Err() != nil || d.Partial() {
			t.Fatalf("pieces of %d: err %v, partial %v", piece, d.Err(), d.Partial())
		}
		if out.Len() != 6+MaxFrameBytes+3 || !strings.HasPrefix(out.String(), "out 1 x") || errOut.String() != "err" || req.String() != `{"id":1}`+"\n" {
			t.Fatalf("pieces of %d: stdout %d bytes, stderr %q, calls %q", piece, out.Len(), errOut.String(), req.String())
		}
	}
}

// TestDeframerRefusesWhatIsNotAFrame stops at bytes of no stream, and
// says so, without failing the copy that feeds it.
func TestDeframerRefusesWhatIsNotAFrame(t *testing.T) {
	var out bytes.Buffer
	d := NewDeframer(&out, &out, &out)
	if n, err := d.Write([]byte("\x09\x00\x00\x00\x02hi")); n != 7 || err != nil {
		t.Fatalf("Write() = %d, %v", n, err)
	}
	if d.Err() == nil || out.Len() != 0 {
		t.Fatalf("err %v, passed on %q", d.Err(), out.String())
	}
	d = NewDeframer(&out, &out, &out)
	d.Write([]byte{FrameStdout, 0, 0})
	if !d.Partial() {
		t.Error("a stream that ends in a frame's header is not partial")
	}
}

// TestFrameInputSendsStdinThenItsEnd interleaves answers with stdin:
// the init reads each in whole frames, stdin ending with an empty one.
func TestFrameInputSendsStdinThenItsEnd(t *testing.T) {
	var wire bytes.Buffer
	in := NewFrameInput(&wire)
	in.Answers().Write([]byte(`{"id":1,"result":2}` + "\n"))
	if err := in.CopyStdin(strings.NewReader("abc")); err != nil {
		t.Fatal(err)
	}
	in.Answers().Write(bytes.Repeat([]byte("a"), MaxFrameBytes+1))
	r := bufio.NewReader(&wire)
	buf := make([]byte, MaxFrameBytes)
	var got []string
	for {
		stream, data, err := ReadFrame(r, buf)
		if err != nil {
			break
		}
		got = append(got, string(rune('0'+stream))+":"+string(data[:min(len(data), 8)]))
	}
	if want := []string{`5:{"id":1,`, "4:abc", "4:", "5:aaaaaaaa", "5:a"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("frames %q, want %q", got, want)
	}
}
