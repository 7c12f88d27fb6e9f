package server

import (
	"context"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task"
)

// TestAttachProcessBothWays: what the caller sends reaches the process
// in order, its output comes back, and the stream ends with its record;
// an attach that does not begin with AttachStart is refused by name.
func TestAttachProcessBothWays(t *testing.T) {
	c := start(t, fake.TestProgram, Options{}, func(c *task.Config) { c.MaxSessions = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sess, err := c.CreateSession(ctx, &pb.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.StartProcess(ctx, &pb.StartProcessRequest{SessionId: sess.GetSessionId(), Argv: []string{"testprog", "cat", "exit", "3"}})
	if err != nil || p.GetState() != pb.ProcessState_PROCESS_RUNNING {
		t.Fatalf("StartProcess() = %v, %v", p, err)
	}
	stream, err := c.AttachProcess(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*pb.AttachProcessRequest{
		{Part: &pb.AttachProcessRequest_Start{Start: &pb.AttachStart{SessionId: sess.GetSessionId(), ProcessId: p.GetProcessId()}}},
		{Part: &pb.AttachProcessRequest_Stdin{Stdin: []byte("one ")}},
		{Part: &pb.AttachProcessRequest_Stdin{Stdin: []byte("two")}},
		{Part: &pb.AttachProcessRequest_CloseStdin{CloseStdin: true}},
	} {
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	stream.CloseSend()
	var out []byte
	var exited *pb.ProcessInfo
	for {
		ev, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Recv() = %v after %q", err, out)
		}
		out = append(out, ev.GetStdout()...)
		if ev.GetExited() != nil {
			exited = ev.GetExited()
		}
	}
	if string(out) != "one two" || exited == nil || exited.GetExitCode() != 3 || exited.GetState() != pb.ProcessState_PROCESS_EXITED {
		t.Fatalf("attach read %q, ended with %v", out, exited)
	}

	bad, err := c.AttachProcess(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bad.Send(&pb.AttachProcessRequest{Part: &pb.AttachProcessRequest_Stdin{Stdin: []byte("x")}})
	if _, err := bad.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("an attach that starts with stdin: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := c.ResizeProcess(ctx, &pb.ResizeProcessRequest{SessionId: sess.GetSessionId(), ProcessId: p.GetProcessId(), Size: &pb.TerminalSize{Rows: 99999, Cols: 80}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a resize past any terminal: %v, want INVALID_ARGUMENT", err)
	}
}
