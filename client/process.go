package client

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"

	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/server/wire"
	"github.com/sandboxd/sandboxd/task/session"
)

// StartProcess starts a background process in a session.
func (c *Client) StartProcess(ctx context.Context, req session.ProcessRequest) (session.ProcessInfo, error) {
	in := &pb.StartProcessRequest{SessionId: req.SessionID, Argv: req.Command.Argv, Shell: req.Command.Shell, Env: req.Env, Workdir: req.Workdir}
	if t := req.Terminal; t != nil {
		in.Terminal = &pb.TerminalSize{Rows: uint32(t.Rows), Cols: uint32(t.Cols), Term: t.Term}
	}
	p, err := c.c.StartProcess(ctx, in)
	if err != nil {
		return session.ProcessInfo{}, fromStatus(err)
	}
	return wire.ProcessFromProto(p), nil
}

// ListProcesses lists a session's background processes.
func (c *Client) ListProcesses(ctx context.Context, sessionID string) ([]session.ProcessInfo, error) {
	resp, err := c.c.ListProcesses(ctx, &pb.ListProcessesRequest{SessionId: sessionID})
	if err != nil {
		return nil, fromStatus(err)
	}
	out := make([]session.ProcessInfo, 0, len(resp.GetProcesses()))
	for _, p := range resp.GetProcesses() {
		out = append(out, wire.ProcessFromProto(p))
	}
	return out, nil
}

// ReadProcessOutput reads at most limit bytes a stream (0: the most) of
// a process's output from offsets, waiting up to wait for some.
func (c *Client) ReadProcessOutput(ctx context.Context, sessionID, processID string, from session.Offsets, limit int, wait time.Duration) (session.Output, error) {
	resp, err := c.c.ReadProcessOutput(ctx, &pb.ReadProcessOutputRequest{
		SessionId: sessionID, ProcessId: processID, StdoutOffset: from.Stdout, StderrOffset: from.Stderr,
		MaxBytes: int32(limit), WaitMs: int32(wait.Milliseconds()),
	})
	if err != nil {
		return session.Output{}, fromStatus(err)
	}
	return session.Output{
		Stdout: resp.GetStdout(), Stderr: resp.GetStderr(),
		Start: session.Offsets{Stdout: resp.GetStdoutStart(), Stderr: resp.GetStderrStart()},
		Next:  session.Offsets{Stdout: resp.GetNextStdoutOffset(), Stderr: resp.GetNextStderrOffset()},
		Info:  wire.ProcessFromProto(resp.GetProcess()),
	}, nil
}

// SignalProcess sends signal n to a process's process group.
func (c *Client) SignalProcess(ctx context.Context, sessionID, processID string, n int) (session.ProcessInfo, error) {
	p, err := c.c.SignalProcess(ctx, &pb.SignalProcessRequest{SessionId: sessionID, ProcessId: processID, Signal: int32(n)})
	if err != nil {
		return session.ProcessInfo{}, fromStatus(err)
	}
	return wire.ProcessFromProto(p), nil
}

// WaitProcess waits for a process to end.
func (c *Client) WaitProcess(ctx context.Context, sessionID, processID string) (session.ProcessInfo, error) {
	p, err := c.c.WaitProcess(ctx, &pb.WaitProcessRequest{SessionId: sessionID, ProcessId: processID})
	if err != nil {
		return session.ProcessInfo{}, fromStatus(err)
	}
	return wire.ProcessFromProto(p), nil
}

// ProcessStream is an attach to a process's streams (AttachProcess): its
// methods send, from any goroutine, in the order they are called; Copy
// receives.
type ProcessStream struct {
	mu     sync.Mutex
	stream grpc.BidiStreamingClient[pb.AttachProcessRequest, pb.AttachProcessEvent]
}

// AttachProcess attaches to a process's streams, its output from offsets
// from.
func (c *Client) AttachProcess(ctx context.Context, sessionID, processID string, from session.Offsets) (*ProcessStream, error) {
	stream, err := c.c.AttachProcess(ctx)
	if err != nil {
		return nil, fromStatus(err)
	}
	p := &ProcessStream{stream: stream}
	start := &pb.AttachStart{SessionId: sessionID, ProcessId: processID, StdoutOffset: from.Stdout, StderrOffset: from.Stderr}
	if err := p.send(&pb.AttachProcessRequest{Part: &pb.AttachProcessRequest_Start{Start: start}}); err != nil {
		return nil, err
	}
	return p, nil
}

// Write sends b to the process's stdin.
func (p *ProcessStream) Write(b []byte) (int, error) {
	if err := p.send(&pb.AttachProcessRequest{Part: &pb.AttachProcessRequest_Stdin{Stdin: b}}); err != nil {
		return 0, err
	}
	return len(b), nil
}

// CloseStdin ends the process's stdin (a Ctrl-D with a terminal).
func (p *ProcessStream) CloseStdin() error {
	return p.send(&pb.AttachProcessRequest{Part: &pb.AttachProcessRequest_CloseStdin{CloseStdin: true}})
}

// CloseSend ends what this stream sends; the output goes on.
func (p *ProcessStream) CloseSend() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stream.CloseSend()
}

// Resize changes the size of the process's terminal.
func (p *ProcessStream) Resize(rows, cols uint16) error {
	return p.send(&pb.AttachProcessRequest{Part: &pb.AttachProcessRequest_Resize{Resize: &pb.TerminalSize{Rows: uint32(rows), Cols: uint32(cols)}}})
}

// Signal sends signal n to the process's process group.
func (p *ProcessStream) Signal(n int) error {
	return p.send(&pb.AttachProcessRequest{Part: &pb.AttachProcessRequest_Signal{Signal: int32(n)}})
}

func (p *ProcessStream) send(m *pb.AttachProcessRequest) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.stream.Send(m); err != nil {
		if errors.Is(err, io.EOF) {
			// The daemon ended the stream: Copy has its status.
			return nil
		}
		return fromStatus(err)
	}
	return nil
}

// Copy copies the process's output to stdout and stderr until it ends,
// and reports how; dropped, when not nil, hears of bytes the daemon no
// longer kept.
func (p *ProcessStream) Copy(stdout, stderr io.Writer, dropped func(int64)) (session.ProcessInfo, error) {
	for {
		ev, err := p.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the attach ended before the process did")
			}
			return session.ProcessInfo{}, fromStatus(err)
		}
		switch e := ev.GetEvent().(type) {
		case *pb.AttachProcessEvent_Stdout:
			if _, err := stdout.Write(e.Stdout); err != nil {
				return session.ProcessInfo{}, err
			}
		case *pb.AttachProcessEvent_Stderr:
			if _, err := stderr.Write(e.Stderr); err != nil {
				return session.ProcessInfo{}, err
			}
		case *pb.AttachProcessEvent_Dropped:
			if dropped != nil {
				dropped(e.Dropped)
			}
		case *pb.AttachProcessEvent_Exited:
			return wire.ProcessFromProto(e.Exited), nil
		}
	}
}

// OpenPort opens a session's port to the daemon's inbound proxy.
func (c *Client) OpenPort(ctx context.Context, sessionID string, port int) (session.Port, error) {
	p, err := c.c.OpenPort(ctx, &pb.OpenPortRequest{SessionId: sessionID, Port: int32(port)})
	if err != nil {
		return session.Port{}, fromStatus(err)
	}
	return wire.PortFromProto(p), nil
}

// ClosePort closes a session's port.
func (c *Client) ClosePort(ctx context.Context, sessionID string, port int) error {
	if _, err := c.c.ClosePort(ctx, &pb.ClosePortRequest{SessionId: sessionID, Port: int32(port)}); err != nil {
		return fromStatus(err)
	}
	return nil
}

// ListPorts lists a session's opened ports.
func (c *Client) ListPorts(ctx context.Context, sessionID string) ([]session.Port, error) {
	resp, err := c.c.ListPorts(ctx, &pb.ListPortsRequest{SessionId: sessionID})
	if err != nil {
		return nil, fromStatus(err)
	}
	out := make([]session.Port, 0, len(resp.GetPorts()))
	for _, p := range resp.GetPorts() {
		out = append(out, wire.PortFromProto(p))
	}
	return out, nil
}
