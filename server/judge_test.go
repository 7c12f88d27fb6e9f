package server

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task"
)

// echo prints its stdin.
func echo(_ context.Context, spec runtime.Spec) runtime.Exit {
	if spec.Stdin != nil {
		io.Copy(spec.Stdout, spec.Stdin)
	}
	return runtime.Exit{}
}

// evaluate sends subs on one Evaluate stream and returns its events.
func evaluate(t *testing.T, c pb.SandboxServiceClient, subs ...*pb.Submission) []*pb.EvaluateEvent {
	t.Helper()
	stream, err := c.Evaluate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range subs {
		if err := stream.Send(&pb.EvaluateRequest{Submission: s}); err != nil {
			t.Fatal(err)
		}
	}
	stream.CloseSend()
	var evs []*pb.EvaluateEvent
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return evs
		}
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
}

func TestEvaluateStreamsCasesJudgementsAndErrors(t *testing.T) {
	c := start(t, echo, Options{}, nil)
	tc := func(in, want string) *pb.TestCase {
		return &pb.TestCase{Stdin: []byte(in), ExpectedStdout: []byte(want)}
	}
	evs := evaluate(t, c,
		&pb.Submission{Id: "echo", Language: "python", Code: "x", Cases: []*pb.TestCase{tc("a", "a"), tc("b", "c")}},
		&pb.Submission{Id: "no expected", Language: "python", Code: "x", Cases: []*pb.TestCase{{Stdin: []byte("a")}}},
		nil,
	)
	var cases int
	var judged *pb.Judgement
	errs := map[string]*pb.SubmissionError{}
	for _, ev := range evs {
		switch e := ev.GetEvent().(type) {
		case *pb.EvaluateEvent_CaseDone:
			if e.CaseDone.GetSubmissionId() != "echo" {
				t.Errorf("a case of %q: only echo's cases run", e.CaseDone.GetSubmissionId())
			}
			cases++
		case *pb.EvaluateEvent_Judgement:
			judged = e.Judgement
		case *pb.EvaluateEvent_Error:
			errs[e.Error.GetSubmissionId()] = e.Error
		}
	}
	if cases != 2 || judged == nil || judged.GetVerdict() != pb.Judgement_WRONG_ANSWER || judged.GetPassed() != 1 || judged.GetFirstFailing() != 1 || judged.GetTotal() != 2 {
		t.Fatalf("%d case events, judgement %v: want 2, and WRONG_ANSWER with 1 of 2 passed", cases, judged)
	}
	if got := judged.GetCases()[1].GetMessage(); got != `line 1: expected "c", got "b"` {
		t.Errorf("the failing case says %q", got)
	}
	if e := errs["no expected"]; e == nil || codes.Code(e.GetCode()) != codes.InvalidArgument || !strings.HasPrefix(e.GetMessage(), "cases[0].expected_stdout: ") {
		t.Errorf("a case that nothing decides: %v, want INVALID_ARGUMENT naming cases[0].expected_stdout", e)
	}
	if e := errs[""]; e == nil || codes.Code(e.GetCode()) != codes.InvalidArgument || e.GetMessage() != "submission: is not set" {
		t.Errorf("a request without a submission: %v", e)
	}
}

func TestEvaluateRefusedWhenBusyCarriesRetryAfter(t *testing.T) {
	block := make(chan struct{})
	c := start(t, func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return runtime.Exit{}
	}, Options{}, func(cfg *task.Config) { cfg.MaxRunning = 1; cfg.MaxQueued = 0 })
	defer close(block)
	first, err := c.RunCode(context.Background(), &pb.RunCodeRequest{Language: "python", Code: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := first.Recv(); err != nil || ev.GetStarted() == nil {
		t.Fatalf("first run did not start: %v %v", ev, err)
	}
	evs := evaluate(t, c, &pb.Submission{Id: "s", Language: "python", Code: "x", Cases: []*pb.TestCase{{ExpectedStdout: []byte("")}}})
	if len(evs) != 1 || evs[0].GetError() == nil {
		t.Fatalf("events %v, want one error", evs)
	}
	e := evs[0].GetError()
	if codes.Code(e.GetCode()) != codes.ResourceExhausted || e.GetRetryAfter().AsDuration() <= 0 || e.GetSubmissionId() != "s" {
		t.Fatalf("a busy daemon: %v, want RESOURCE_EXHAUSTED with retry_after", e)
	}
}
