package launch

import (
	"bytes"
	"encoding/binary"
	"io"
	"strings"
	"testing"
)

func TestFramesCarryEachStreamInOrder(t *testing.T) {
	var conn bytes.Buffer
	stdout, stderr := NewFrameWriters(&conn)
	big := bytes.Repeat([]byte("x"), 2*MaxFrameBytes+5)
	for _, w := range []struct {
		to *FrameWriter
		p  []byte
	}{{stdout, []byte("one ")}, {stderr, []byte("err")}, {stdout, big}, {stdout, []byte(" two")}} {
		if n, err := w.to.Write(w.p); err != nil || n != len(w.p) {
			t.Fatalf("Write() = %d, %v", n, err)
		}
	}
	var out, errOut bytes.Buffer
	if err := NewDeframer(&out, &errOut, nil).CopyFrom(&conn); err != nil {
		t.Fatalf("CopyFrom() = %v, want nil at the end", err)
	}
	if want := "one " + string(big) + " two"; out.String() != want || errOut.String() != "err" {
		t.Fatalf("stdout %d bytes, stderr %q", out.Len(), errOut.String())
	}
}

func TestCopyFromRefusesWhatIsNotAFrame(t *testing.T) {
	frame := func(stream byte, n uint32, data string) []byte {
		b := []byte{stream, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[1:], n)
		return append(b, data...)
	}
	for name, tc := range map[string]struct {
		in   []byte
		want string
	}{
		"requests without a channel": {frame(FrameCall, 2, "hi"), "stream 3"},
		"unknown stream":             {frame(9, 2, "hi"), "stream 9"},
		"too long":                   {frame(FrameStdout, MaxFrameBytes+1, ""), "bytes"},
		"cut short":                  {frame(FrameStderr, 10, "abc"), "inside a frame"},
		"cut header":                 {frame(FrameStderr, 10, "")[:3], "inside a frame"},
	} {
		t.Run(name, func(t *testing.T) {
			err := NewDeframer(io.Discard, io.Discard, nil).CopyFrom(bytes.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CopyFrom() = %v, want an error with %q", err, tc.want)
			}
		})
	}
}
