package server

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/server/wire"
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
	info, err := s.svc.StartProcess(ctx, session.ProcessRequest{
		SessionID: req.GetSessionId(), Command: run.Command{Argv: req.GetArgv(), Shell: req.GetShell()},
		Env: req.GetEnv(), Workdir: req.GetWorkdir(),
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
