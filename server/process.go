package server

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/server/wire"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
)

// processRequest is what names a process: a session and its process id.
type processRequest interface {
	GetSessionId() string
	GetProcessId() string
}

// checkProcess refuses a request that names no session or no process.
func checkProcess(req processRequest) error {
	switch {
	case req.GetSessionId() == "":
		return status.Error(codes.InvalidArgument, "session_id: is empty")
	case req.GetProcessId() == "":
		return status.Error(codes.InvalidArgument, "process_id: is empty")
	}
	return nil
}

// StartProcess starts a background process in a session.
func (s *Server) StartProcess(ctx context.Context, req *pb.StartProcessRequest) (*pb.ProcessInfo, error) {
	if req.GetSessionId() == "" {
		return nil, status.Error(codes.InvalidArgument, "session_id: is empty")
	}
	terminal, err := wire.TerminalFromProto(req.GetTerminal(), "terminal")
	if err != nil {
		return nil, ToStatus(err)
	}
	info, err := s.svc.StartProcess(ctx, session.ProcessRequest{
		SessionID: req.GetSessionId(), Command: run.Command{Argv: req.GetArgv(), Shell: req.GetShell()},
		Env: req.GetEnv(), Workdir: req.GetWorkdir(), Terminal: terminal,
	})
	if err != nil {
		return nil, ToStatus(err)
	}
	return wire.ProcessToProto(info), nil
}

// ListProcesses lists a session's background processes.
func (s *Server) ListProcesses(ctx context.Context, req *pb.ListProcessesRequest) (*pb.ListProcessesResponse, error) {
	if req.GetSessionId() == "" {
		return nil, status.Error(codes.InvalidArgument, "session_id: is empty")
	}
	list, err := s.svc.ListProcesses(ctx, req.GetSessionId())
	if err != nil {
		return nil, ToStatus(err)
	}
	out := &pb.ListProcessesResponse{}
	for _, info := range list {
		out.Processes = append(out.Processes, wire.ProcessToProto(info))
	}
	return out, nil
}

// ReadProcessOutput reads a process's output from offsets.
func (s *Server) ReadProcessOutput(ctx context.Context, req *pb.ReadProcessOutputRequest) (*pb.ReadProcessOutputResponse, error) {
	if err := checkProcess(req); err != nil {
		return nil, err
	}
	o, err := s.svc.ReadProcessOutput(ctx, req.GetSessionId(), req.GetProcessId(),
		session.Offsets{Stdout: req.GetStdoutOffset(), Stderr: req.GetStderrOffset()}, int(req.GetMaxBytes()),
		time.Duration(req.GetWaitMs())*time.Millisecond)
	if err != nil {
		return nil, ToStatus(err)
	}
	return wire.ProcessOutputToProto(o), nil
}

// WriteProcessStdin writes to a process's stdin.
func (s *Server) WriteProcessStdin(ctx context.Context, req *pb.WriteProcessStdinRequest) (*pb.WriteProcessStdinResponse, error) {
	if err := checkProcess(req); err != nil {
		return nil, err
	}
	if err := s.svc.WriteProcessStdin(ctx, req.GetSessionId(), req.GetProcessId(), req.GetData(), req.GetClose()); err != nil {
		return nil, ToStatus(err)
	}
	return &pb.WriteProcessStdinResponse{}, nil
}

// SignalProcess signals a process's process group.
func (s *Server) SignalProcess(ctx context.Context, req *pb.SignalProcessRequest) (*pb.ProcessInfo, error) {
	if err := checkProcess(req); err != nil {
		return nil, err
	}
	info, err := s.svc.SignalProcess(ctx, req.GetSessionId(), req.GetProcessId(), int(req.GetSignal()))
	if err != nil {
		return nil, ToStatus(err)
	}
	return wire.ProcessToProto(info), nil
}

// WaitProcess waits for a process to end.
func (s *Server) WaitProcess(ctx context.Context, req *pb.WaitProcessRequest) (*pb.ProcessInfo, error) {
	if err := checkProcess(req); err != nil {
		return nil, err
	}
	info, err := s.svc.WaitProcess(ctx, req.GetSessionId(), req.GetProcessId())
	if err != nil {
		return nil, ToStatus(err)
	}
	return wire.ProcessToProto(info), nil
}

// ResizeProcess changes the size of a process's terminal.
func (s *Server) ResizeProcess(ctx context.Context, req *pb.ResizeProcessRequest) (*pb.ResizeProcessResponse, error) {
	if err := checkProcess(req); err != nil {
		return nil, err
	}
	size, err := wire.TerminalFromProto(req.GetSize(), "size")
	if err != nil {
		return nil, ToStatus(err)
	}
	if size == nil {
		return nil, status.Error(codes.InvalidArgument, "size: is not set")
	}
	if err := s.svc.ResizeProcess(ctx, req.GetSessionId(), req.GetProcessId(), size.Rows, size.Cols); err != nil {
		return nil, ToStatus(err)
	}
	return &pb.ResizeProcessResponse{}, nil
}

// AttachProcess relays a process's streams both ways: what the caller
// sends goes to the process in order, from one goroutine; its output
// goes out as it comes, read from offsets, until it has ended and all of
// it was sent, or the caller leaves.
func (s *Server) AttachProcess(stream grpc.BidiStreamingServer[pb.AttachProcessRequest, pb.AttachProcessEvent]) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return status.Error(codes.InvalidArgument, "part: the first message is not an AttachStart")
	}
	if err := checkProcess(start); err != nil {
		return err
	}
	sid, pid := start.GetSessionId(), start.GetProcessId()
	if _, err := s.svc.ReadProcessOutput(ctx, sid, pid, session.Offsets{}, 1, 0); err != nil {
		return ToStatus(err)
	}
	// What the caller sent wrong ends the attach, and the read it waits in.
	var inputErr atomic.Pointer[error]
	go func() {
		if err := s.attachInput(ctx, stream, sid, pid); err != nil {
			inputErr.Store(&err)
			cancel()
		}
	}()
	at := session.Offsets{Stdout: start.GetStdoutOffset(), Stderr: start.GetStderrOffset()}
	for {
		o, err := s.svc.ReadProcessOutput(ctx, sid, pid, at, 0, task.MaxProcessWait)
		if err != nil {
			if in := inputErr.Load(); in != nil {
				return *in
			}
			return ToStatus(err)
		}
		if dropped := o.Start.Stdout - at.Stdout + o.Start.Stderr - at.Stderr; dropped > 0 {
			if err := stream.Send(&pb.AttachProcessEvent{Event: &pb.AttachProcessEvent_Dropped{Dropped: dropped}}); err != nil {
				return err
			}
		}
		if len(o.Stdout) > 0 {
			if err := stream.Send(&pb.AttachProcessEvent{Event: &pb.AttachProcessEvent_Stdout{Stdout: o.Stdout}}); err != nil {
				return err
			}
		}
		if len(o.Stderr) > 0 {
			if err := stream.Send(&pb.AttachProcessEvent{Event: &pb.AttachProcessEvent_Stderr{Stderr: o.Stderr}}); err != nil {
				return err
			}
		}
		at = o.Next
		if o.Info.State != session.Running && o.Next.Stdout >= o.Info.StdoutBytes && o.Next.Stderr >= o.Info.StderrBytes {
			return stream.Send(&pb.AttachProcessEvent{Event: &pb.AttachProcessEvent_Exited{Exited: wire.ProcessToProto(o.Info)}})
		}
	}
}

// attachInput passes what the caller sends to the process until the
// caller stops sending (nil: the output goes on) or sends what cannot be
// done (an error).
func (s *Server) attachInput(ctx context.Context, stream grpc.BidiStreamingServer[pb.AttachProcessRequest, pb.AttachProcessEvent], sid, pid string) error {
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch part := msg.GetPart().(type) {
		case *pb.AttachProcessRequest_Stdin, *pb.AttachProcessRequest_CloseStdin:
			err = s.svc.WriteProcessStdin(ctx, sid, pid, msg.GetStdin(), msg.GetCloseStdin())
			if errdefs.IsFailedPrecondition(err) {
				// It ended while the caller typed: the output's end
				// says so.
				err = nil
			}
		case *pb.AttachProcessRequest_Resize:
			var size *session.Terminal
			if size, err = wire.TerminalFromProto(part.Resize, "resize"); err == nil {
				err = s.svc.ResizeProcess(ctx, sid, pid, size.Rows, size.Cols)
			}
		case *pb.AttachProcessRequest_Signal:
			_, err = s.svc.SignalProcess(ctx, sid, pid, int(part.Signal))
		default:
			err = status.Error(codes.InvalidArgument, "part: only the first message is an AttachStart")
		}
		if err != nil {
			return ToStatus(err)
		}
	}
}

// OpenPort opens a session's port to the inbound proxy.
func (s *Server) OpenPort(ctx context.Context, req *pb.OpenPortRequest) (*pb.PortInfo, error) {
	if req.GetSessionId() == "" {
		return nil, status.Error(codes.InvalidArgument, "session_id: is empty")
	}
	p, err := s.svc.OpenPort(ctx, req.GetSessionId(), int(req.GetPort()))
	if err != nil {
		return nil, ToStatus(err)
	}
	return wire.PortToProto(p), nil
}

// ClosePort closes a session's port.
func (s *Server) ClosePort(ctx context.Context, req *pb.ClosePortRequest) (*pb.ClosePortResponse, error) {
	if req.GetSessionId() == "" {
		return nil, status.Error(codes.InvalidArgument, "session_id: is empty")
	}
	if err := s.svc.ClosePort(ctx, req.GetSessionId(), int(req.GetPort())); err != nil {
		return nil, ToStatus(err)
	}
	return &pb.ClosePortResponse{}, nil
}

// ListPorts lists a session's opened ports.
func (s *Server) ListPorts(ctx context.Context, req *pb.ListPortsRequest) (*pb.ListPortsResponse, error) {
	if req.GetSessionId() == "" {
		return nil, status.Error(codes.InvalidArgument, "session_id: is empty")
	}
	ports, err := s.svc.ListPorts(ctx, req.GetSessionId())
	if err != nil {
		return nil, ToStatus(err)
	}
	out := &pb.ListPortsResponse{}
	for _, p := range ports {
		out.Ports = append(out.Ports, wire.PortToProto(p))
	}
	return out, nil
}
