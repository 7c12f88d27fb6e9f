package wire

import (
	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
	"google.golang.org/protobuf/types/known/timestamppb"
)

var processStateToProto = map[session.ProcessState]pb.ProcessState{
	session.Running: pb.ProcessState_PROCESS_RUNNING,
	session.Exited:  pb.ProcessState_PROCESS_EXITED,
	session.Killed:  pb.ProcessState_PROCESS_KILLED,
}

// ProcessToProto is a background process's record on the wire.
func ProcessToProto(i session.ProcessInfo) *pb.ProcessInfo {
	p := &pb.ProcessInfo{
		SessionId: i.SessionID, ProcessId: i.ID, Argv: i.Argv, Workdir: i.Workdir, State: processStateToProto[i.State],
		ExitCode: int32(i.ExitCode), StartedAt: timestamppb.New(i.StartedAt), StdoutBytes: i.StdoutBytes, StderrBytes: i.StderrBytes,
		Terminal: i.Terminal,
	}
	if !i.EndedAt.IsZero() {
		p.EndedAt = timestamppb.New(i.EndedAt)
	}
	return p
}

// ProcessOutputToProto is a read of a process's output on the wire.
func ProcessOutputToProto(o session.Output) *pb.ReadProcessOutputResponse {
	return &pb.ReadProcessOutputResponse{
		Stdout: o.Stdout, Stderr: o.Stderr, StdoutStart: o.Start.Stdout, StderrStart: o.Start.Stderr,
		NextStdoutOffset: o.Next.Stdout, NextStderrOffset: o.Next.Stderr, Process: ProcessToProto(o.Info),
	}
}

// TerminalFromProto is a terminal's size and TERM, or nil; a size past
// what a terminal has is an error naming field.
func TerminalFromProto(t *pb.TerminalSize, field string) (*session.Terminal, error) {
	if t == nil {
		return nil, nil
	}
	if t.GetRows() > maxTerminal || t.GetCols() > maxTerminal {
		return nil, run.Invalid(field, "%d rows by %d columns: at most %d each", t.GetRows(), t.GetCols(), maxTerminal)
	}
	return &session.Terminal{Rows: uint16(t.GetRows()), Cols: uint16(t.GetCols()), Term: t.GetTerm()}, nil
}

// maxTerminal bounds a terminal's rows and columns.
const maxTerminal = 10000

var processStateFromProto = inverse(processStateToProto)

// ProcessFromProto is a background process's record off the wire.
func ProcessFromProto(p *pb.ProcessInfo) session.ProcessInfo {
	info := session.ProcessInfo{
		ID: p.GetProcessId(), SessionID: p.GetSessionId(), Argv: p.GetArgv(), Workdir: p.GetWorkdir(), Terminal: p.GetTerminal(),
		State: processStateFromProto[p.GetState()], ExitCode: int(p.GetExitCode()), StartedAt: p.GetStartedAt().AsTime(),
		StdoutBytes: p.GetStdoutBytes(), StderrBytes: p.GetStderrBytes(),
	}
	if p.GetEndedAt() != nil {
		info.EndedAt = p.GetEndedAt().AsTime()
	}
	return info
}

// PortToProto is an opened port on the wire.
func PortToProto(p session.Port) *pb.PortInfo {
	return &pb.PortInfo{SessionId: p.SessionID, Port: int32(p.Port), Url: p.URL, Token: p.Token, OpenedAt: timestamppb.New(p.OpenedAt)}
}

// PortFromProto is an opened port off the wire.
func PortFromProto(p *pb.PortInfo) session.Port {
	return session.Port{SessionID: p.GetSessionId(), Port: int(p.GetPort()), URL: p.GetUrl(), Token: p.GetToken(), OpenedAt: p.GetOpenedAt().AsTime()}
}
