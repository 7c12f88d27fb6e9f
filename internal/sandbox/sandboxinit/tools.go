package sandboxinit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/sandbox/launch"
)

// relay is the init's side of a run with a tool channel (see
// launch.ToolsFD): the program's stdin, stdout, stderr and channel are
// the init's pipes and socket, whose other ends it copies to and from its
// own streams in frames.
type relay struct {
	// program are the program's ends: stdin, stdout, stderr, channel.
	program [4]*os.File
	stdin   *os.File // the init's end of the program's stdin
	channel *os.File // the init's end of the channel
	copies  sync.WaitGroup
}

func newRelay() (*relay, error) {
	r := &relay{}
	var outR, errR *os.File
	var err error
	if r.program[0], r.stdin, err = os.Pipe(); err != nil {
		return nil, err
	}
	if outR, r.program[1], err = os.Pipe(); err != nil {
		return nil, err
	}
	if errR, r.program[2], err = os.Pipe(); err != nil {
		return nil, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("tool channel: %w", err)
	}
	r.program[3], r.channel = os.NewFile(uintptr(fds[0]), "tools"), os.NewFile(uintptr(fds[1]), "tools")
	stdout, stderr, calls := launch.NewRelayWriters(os.Stdout)
	for _, c := range []struct {
		from *os.File
		to   io.Writer
	}{{outR, stdout}, {errR, stderr}, {r.channel, calls}} {
		r.copies.Add(1)
		go func() {
			defer r.copies.Done()
			buf := make([]byte, launch.MaxFrameBytes)
			_, _ = io.CopyBuffer(struct{ io.Writer }{c.to}, c.from, buf)
			if c.from != r.channel {
				c.from.Close()
			}
		}()
	}
	go r.readInput(bufio.NewReader(os.Stdin))
	return r, nil
}

// started closes the init's copies of the program's ends, so that the
// copies see the end of the output once every process that holds them is
// gone.
func (r *relay) started() {
	for _, f := range r.program {
		f.Close()
	}
}

// drain waits, once every other process is gone, for the copies of the
// program's output and requests to end, so that the report comes after
// them.
func (r *relay) drain() {
	done := make(chan struct{})
	go func() { r.copies.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(endBound):
		fmt.Fprintln(os.Stderr, "sandboxd-init: the program's output did not end")
	}
	r.channel.Close()
}

// readInput passes the program's stdin on through a queue, so that stdin
// the program does not read never holds up an answer, and the answers to
// the channel.
func (r *relay) readInput(in *bufio.Reader) {
	q := &stdinQueue{}
	q.cond = sync.NewCond(&q.mu)
	go q.feed(r.stdin)
	buf := make([]byte, launch.MaxFrameBytes)
	for {
		stream, data, err := launch.ReadFrame(in, buf)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				fmt.Fprintf(os.Stderr, "sandboxd-init: input: %v\n", err)
			}
			q.push(nil)
			return
		}
		switch stream {
		case launch.FrameStdin:
			q.push(data)
		case launch.FrameAnswer:
			// A program that reads no answers stalls only itself.
			_, _ = r.channel.Write(data)
		default:
			fmt.Fprintf(os.Stderr, "sandboxd-init: input frame of unknown stream %d\n", stream)
			q.push(nil)
			return
		}
	}
}

// stdinQueue holds the program's stdin until the program reads it; an
// empty push is its end.
type stdinQueue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	chunks [][]byte
	ended  bool
}

func (q *stdinQueue) push(data []byte) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ended {
		return
	}
	if len(data) == 0 {
		q.ended = true
	} else {
		q.chunks = append(q.chunks, append([]byte(nil), data...))
	}
	q.cond.Signal()
}

func (q *stdinQueue) feed(w *os.File) {
	defer w.Close()
	for {
		q.mu.Lock()
		for len(q.chunks) == 0 && !q.ended {
			q.cond.Wait()
		}
		if len(q.chunks) == 0 {
			q.mu.Unlock()
			return
		}
		chunk := q.chunks[0]
		q.chunks = q.chunks[1:]
		q.mu.Unlock()
		if _, err := w.Write(chunk); err != nil {
			return // the program closed its stdin
		}
	}
}
