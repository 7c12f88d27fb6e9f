package containerd

import (
	"bytes"
	"io"
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// sizes keeps what is written to it and the size of each write.
type sizes struct {
	bytes.Buffer
	writes []int
}

func (s *sizes) Write(p []byte) (int, error) {
	s.writes = append(s.writes, len(p))
	return s.Buffer.Write(p)
}

// TestFIFOReadsGrowWithTheOutput: a stream that fills a read grows its FIFO
// and is read in larger reads; a line is read as it came, the FIFO left as
// it was. Every byte arrives, in order, either way.
func TestFIFOReadsGrowWithTheOutput(t *testing.T) {
	for _, tt := range []struct {
		name      string
		out       []byte
		wantGrown bool
	}{
		{"a line", []byte("1\n"), false},
		{"3 MiB", bytes.Repeat([]byte("0123456789abcdef"), 3<<16), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			before, err := unix.FcntlInt(r.Fd(), unix.F_GETPIPE_SZ, 0)
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				w.Write(tt.out)
				w.Close()
			}()
			late := newLateStreams()
			var got sizes
			late.set(&got, io.Discard)
			n, err := io.Copy(lateWriter{late, &late.stdout}, r)
			if err != nil || n != int64(len(tt.out)) || !bytes.Equal(got.Bytes(), tt.out) {
				t.Fatalf("copied %d bytes, %v; equal: %v", n, err, bytes.Equal(got.Bytes(), tt.out))
			}
			after, err := unix.FcntlInt(r.Fd(), unix.F_GETPIPE_SZ, 0)
			if err != nil {
				t.Fatal(err)
			}
			if grown := after > before; grown != tt.wantGrown || (grown && after != fifoBytes) {
				t.Errorf("the pipe went from %d to %d bytes; want grown to %d: %v", before, after, fifoBytes, tt.wantGrown)
			}
			if largest := slices.Max(got.writes); tt.wantGrown && largest <= firstRead {
				t.Errorf("the largest read was %d bytes; a full stream must be read in more than %d", largest, firstRead)
			}
		})
	}
}
