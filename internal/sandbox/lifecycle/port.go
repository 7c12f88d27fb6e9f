package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/internal/sandbox/launch"
	"github.com/sandboxd/sandboxd/runtime"
)

var _ runtime.PortDialer = (*session)(nil)

// DialPort asks the session's init to connect to port on the container's
// loopback, and relays the connection as the init relays a background
// process's streams: what is written goes as its input, what the server
// sends comes as its output.
func (s *session) DialPort(ctx context.Context, port uint16) (net.Conn, error) {
	if port == 0 {
		return nil, errdefs.ErrInvalidArgument.WithMessage("port 0 is no port")
	}
	rc := &relayConn{port: port}
	rc.cond = sync.NewCond(&rc.mu)
	proc := s.procs.add(s, runtime.ProcessSpec{Stdout: received{rc}})
	rc.proc = proc
	if err := s.message(launch.Spec{Process: proc.n, Port: port}, nil); err != nil {
		s.procs.end(proc.n, runtime.ProcessExit{SessionEnded: true})
		return nil, err
	}
	select {
	case <-proc.started:
	case <-proc.done:
	case <-ctx.Done():
		// The init may connect yet: the connection ends with the session
		// or when the server closes it.
		go func() {
			<-proc.started
			rc.Close()
		}()
		return nil, fmt.Errorf("connect to port %d in %s: %w", port, s.c.name, ctx.Err())
	}
	if proc.startErr != "" {
		return nil, errdefs.ErrUnavailable.WithMessage(proc.startErr)
	}
	if proc.exit.SessionEnded {
		return nil, errdefs.ErrUnavailable.WithMessage(fmt.Sprintf("the session's container %s ended", s.c.name))
	}
	go func() {
		<-proc.done
		rc.end(io.EOF)
	}()
	return rc, nil
}

// maxRelayBuffer bounds what a relayed connection holds that its reader
// has not read: the init's channel has no flow control of its own, so a
// server that sends faster than the proxy's client reads has the
// connection closed rather than the daemon's memory taken.
const maxRelayBuffer = 8 << 20

// relayConn is the host's end of a connection the init relays.
type relayConn struct {
	port uint16
	proc *process

	mu       sync.Mutex
	cond     *sync.Cond
	buf      []byte
	err      error // what reads return once buf is empty
	closed   bool
	deadline time.Time
	timer    *time.Timer
}

var errRelayFull = errors.New("the relayed connection's reader fell behind by more than 8 MiB")

// received is where the session's frames write what the server sent.
type received struct{ c *relayConn }

func (r received) Write(p []byte) (int, error) { return r.c.receive(p) }

// receive takes what the server sent; past the buffer's bound the
// connection is closed.
func (c *relayConn) receive(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return len(p), nil
	}
	if len(c.buf)+len(p) > maxRelayBuffer {
		c.err = errRelayFull
		go c.proc.close()
	} else {
		c.buf = append(c.buf, p...)
	}
	c.cond.Broadcast()
	return len(p), nil
}

// end makes reads return err once what came is read.
func (c *relayConn) end(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
	c.cond.Broadcast()
}

func (c *relayConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.buf) == 0 && c.err == nil && !c.closed && !c.expired() {
		c.cond.Wait()
	}
	switch {
	case c.closed:
		return 0, net.ErrClosed
	case len(c.buf) > 0:
		n := copy(p, c.buf)
		c.buf = c.buf[n:]
		return n, nil
	case c.expired():
		return 0, os.ErrDeadlineExceeded
	}
	return 0, c.err
}

func (c *relayConn) expired() bool { return !c.deadline.IsZero() && !time.Now().Before(c.deadline) }

// Write sends p to the server, as the process's input: it does not wait
// for the server to read it.
func (c *relayConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return 0, net.ErrClosed
	}
	if err := c.proc.WriteStdin(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// CloseWrite tells the server the request is whole (a half-close).
func (c *relayConn) CloseWrite() error { return c.proc.CloseStdin() }

func (c *relayConn) Close() error {
	c.mu.Lock()
	already := c.closed
	c.closed = true
	if c.timer != nil {
		c.timer.Stop()
	}
	c.mu.Unlock()
	c.cond.Broadcast()
	if already {
		return nil
	}
	return c.proc.close()
}

func (c *relayConn) LocalAddr() net.Addr  { return relayAddr(0) }
func (c *relayConn) RemoteAddr() net.Addr { return relayAddr(c.port) }

func (c *relayConn) SetDeadline(t time.Time) error { return c.SetReadDeadline(t) }

// SetReadDeadline wakes a waiting Read at t. Writes never wait.
func (c *relayConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline = t
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	if !t.IsZero() {
		c.timer = time.AfterFunc(time.Until(t), c.cond.Broadcast)
	}
	c.cond.Broadcast()
	return nil
}

func (c *relayConn) SetWriteDeadline(time.Time) error { return nil }

// relayAddr is the port a relayed connection reaches, on the sandbox's
// loopback.
type relayAddr uint16

func (relayAddr) Network() string  { return "sandboxd-relay" }
func (a relayAddr) String() string { return fmt.Sprintf("127.0.0.1:%d", uint16(a)) }

// close closes a relayed connection in the init, unless it ended.
func (p *process) close() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	return p.s.message(launch.Spec{Process: p.n, Close: true}, nil)
}
