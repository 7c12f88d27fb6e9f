package server

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/internal/edge/budget"
	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/run"
)

// TestAbsurdLimitsAreRefusedByName is the regression test of limits that
// wrapped around: a timeout of 2^58+5000 ms became 5 s, and -2^63 ms the
// default.
func TestAbsurdLimitsAreRefusedByName(t *testing.T) {
	c := start(t, hello, Options{}, nil)
	for _, ms := range []int64{1<<58 + 5000, math.MinInt64, math.MaxInt64} {
		stream, err := c.RunCode(context.Background(), &pb.RunCodeRequest{Language: "python", Code: "x",
			Options: &pb.RunOptions{Limits: &pb.Limits{TimeoutMs: ms}}})
		if err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "limits.timeout_ms") {
			t.Errorf("timeout_ms %d: %v, want INVALID_ARGUMENT naming limits.timeout_ms", ms, err)
		}
	}
}

// blockUntilKilled runs until its container is killed.
func blockUntilKilled(ctx context.Context, _ runtime.Spec) runtime.Exit {
	<-ctx.Done()
	return runtime.Exit{Code: 137}
}

// TestTheRequestBudgetRefusesBeyondIt holds every call of the budget with
// one run, then asks for another: refused at once with a retry hint. A
// budget smaller than the largest request refuses every call before its
// request is read.
func TestTheRequestBudgetRefusesBeyondIt(t *testing.T) {
	b := budget.New(1<<30, 1)
	c := start(t, blockUntilKilled, Options{Budget: b, MaxRecvBytes: 1 << 20}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, err := c.RunCode(ctx, &pb.RunCodeRequest{Language: "python", Code: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Recv(); err != nil { // started: the call is in flight
		t.Fatal(err)
	}
	second, err := c.RunCode(context.Background(), &pb.RunCodeRequest{Language: "python", Code: "x"})
	if err == nil {
		_, err = second.Recv()
	}
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || len(st.Details()) == 0 {
		t.Fatalf("a call beyond the budget: %v, want RESOURCE_EXHAUSTED with RetryInfo", err)
	}
	if _, ok := st.Details()[0].(*errdetails.RetryInfo); !ok {
		t.Fatalf("details %v, want RetryInfo", st.Details())
	}

	small := start(t, hello, Options{Budget: budget.New(1<<10, 10), MaxRecvBytes: 1 << 20}, nil)
	stream, err := small.RunCode(context.Background(), &pb.RunCodeRequest{Language: "python", Code: "x"})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a budget below the largest request: %v, want RESOURCE_EXHAUSTED", err)
	}
}

// TestARequestThatDoesNotArriveEndsItsCall opens a call and never sends its
// request: the call ends after the read timeout, and gives its share of
// the budget back.
func TestARequestThatDoesNotArriveEndsItsCall(t *testing.T) {
	b := budget.New(4<<20, 4)
	conn := startConn(t, hello, Options{Budget: b, MaxRecvBytes: 1 << 20, ReadTimeout: 300 * time.Millisecond}, nil)
	desc := &grpc.StreamDesc{StreamName: "RunCode", ServerStreams: true, ClientStreams: true}
	cs, err := conn.NewStream(context.Background(), desc, "/sandboxd.v1.SandboxService/RunCode")
	if err != nil {
		t.Fatal(err)
	}
	var ev pb.RunEvent
	start := time.Now()
	err = cs.RecvMsg(&ev)
	if status.Code(err) != codes.DeadlineExceeded || time.Since(start) > 5*time.Second {
		t.Fatalf("RecvMsg() = %v after %v, want DEADLINE_EXCEEDED after the read timeout", err, time.Since(start))
	}
	deadline := time.Now().Add(5 * time.Second)
	for !b.Take(4 << 20) {
		if time.Now().After(deadline) {
			t.Fatal("the call did not give its share of the budget back")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// blockingSink is a client that stops reading after its first event: its
// Send blocks until the call's context ends, as gRPC's does once the
// client's window is full.
type blockingSink struct {
	eventSink
	sent int
}

func (s *blockingSink) Send(ev *pb.RunEvent) error {
	if s.sent++; s.sent > 1 {
		<-s.ctx.Done()
		return s.ctx.Err()
	}
	return s.eventSink.Send(ev)
}

// TestAClientThatStopsReadingIsDropped runs a program that floods its
// output to a client that stops reading: the run ends at its timeout, its
// result is kept for GetRun, and the call ends after the stall timeout.
func TestAClientThatStopsReadingIsDropped(t *testing.T) {
	flood := func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		chunk := []byte(strings.Repeat("x", 4<<10))
		for ctx.Err() == nil {
			spec.Stdout.Write(chunk)
			time.Sleep(time.Millisecond)
		}
		return runtime.Exit{Code: 137}
	}
	svc := newEngine(t, flood, func(cfg *task.Config) { cfg.StallTimeout = 500 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink := &blockingSink{eventSink: eventSink{ctx: ctx}}
	start := time.Now()
	err := New(svc).RunCode(&pb.RunCodeRequest{Language: "python", Code: "x",
		Options: &pb.RunOptions{Limits: &pb.Limits{TimeoutMs: 300}}}, sink)
	if status.Code(err) != codes.DeadlineExceeded || time.Since(start) > 5*time.Second {
		t.Fatalf("RunCode() = %v after %v, want DEADLINE_EXCEEDED within the timeout and the stall timeout", err, time.Since(start))
	}
	id := sink.events[0].GetStarted().GetRunId()
	rn, err := svc.Get(ctx, id)
	if err != nil || rn.Result == nil || rn.Result.Status != run.StatusTimeout {
		t.Fatalf("Get() = %+v, %v; want the run finished with TIMEOUT", rn, err)
	}
}

// TestMountsFollowTheListenersCaller asks for an operator mount on a
// listener of the operator (the socket) and on one of token callers: only
// the grant decides.
func TestMountsFollowTheListenersCaller(t *testing.T) {
	withData := func(cfg *task.Config) { cfg.Mounts = map[string]string{"data": t.TempDir()} }
	for _, tt := range []struct {
		name   string
		caller access.Caller
		want   codes.Code
	}{
		{"the operator", access.Operator, codes.OK},
		{"a token caller", access.Caller{Name: "token"}, codes.PermissionDenied},
		{"a token caller granted it", access.Caller{Name: "token", Mounts: []string{"data"}}, codes.OK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := start(t, hello, Options{Caller: tt.caller}, withData)
			stream, err := c.RunCommand(context.Background(), &pb.RunCommandRequest{Shell: "ls",
				Options: &pb.RunOptions{Mounts: []string{"data"}}})
			if err == nil {
				events := collectErr(stream)
				err = events
			}
			if status.Code(err) != tt.want {
				t.Fatalf("a mount asked for by %s: %v, want %v", tt.name, err, tt.want)
			}
		})
	}
}

// collectErr reads a stream to its end and returns how it ended: nil when
// it ended with a result.
func collectErr(stream grpc.ServerStreamingClient[pb.RunEvent]) error {
	for {
		ev, err := stream.Recv()
		if err != nil {
			return err
		}
		if ev.GetResult() != nil {
			return nil
		}
	}
}
