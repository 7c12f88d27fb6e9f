package launch

import (
	"bufio"
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
	if err := CopyFrames(bufio.NewReader(&conn), &out, &errOut); err != nil {
		t.Fatalf("CopyFrames() = %v, want nil at the end", err)
	}
	if want := "one " + string(big) + " two"; out.String() != want || errOut.String() != "err" {
		t.Fatalf("stdout %d bytes, stderr %q", out.Len(), errOut.String())
	}
}

func TestCopyFramesRefusesWhatIsNotAFrame(t *testing.T) {
	frame := func(stream byte, n uint32, data string) []byte {
		b := []byte{stream, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[1:], n)
		return append(b, data...)
	}
	for name, tc := range map[string]struct {
		in   []byte
		want string
	}{
		"unknown stream": {frame(3, 2, "hi"), "unknown stream 3"},
		"too long":       {frame(FrameStdout, MaxFrameBytes+1, ""), "over"},
		"cut short":      {frame(FrameStderr, 10, "abc"), "output frame: unexpected EOF"},
		"cut header":     {frame(FrameStderr, 10, "")[:3], "output frame: unexpected EOF"},
	} {
		t.Run(name, func(t *testing.T) {
			err := CopyFrames(bufio.NewReader(bytes.NewReader(tc.in)), io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CopyFrames() = %v, want an error with %q", err, tc.want)
			}
		})
	}
}
