package client

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/server/wire"
	"github.com/sandboxd/sandboxd/task/judge"
)

// Judged is one submission's end in a batch: its judgement, or the error
// it alone would have failed with (the engine's error classes).
type Judged struct {
	SubmissionID string
	Judgement    judge.Judgement
	Err          error
}

// EvaluateEvents hear a batch's events; either may be nil.
type EvaluateEvents struct {
	// Case hears each case as it is decided.
	Case func(submissionID string, c judge.CaseResult)
	// Judged hears each submission's end, as soon as it is known.
	Judged func(Judged)
}

// Evaluate judges subs as one batch on one stream and returns each
// submission's end in the order subs has it.
func (c *Client) Evaluate(ctx context.Context, subs []judge.Submission, ev EvaluateEvents) ([]Judged, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.c.Evaluate(ctx)
	if err != nil {
		return nil, fromStatus(err)
	}
	sent := make(chan error, 1)
	go func() {
		for _, s := range subs {
			if err := stream.Send(&pb.EvaluateRequest{Submission: wire.SubmissionToProto(s)}); err != nil {
				// The receiving side hears why.
				sent <- nil
				return
			}
		}
		sent <- stream.CloseSend()
	}()
	byID := map[string][]int{}
	for i, s := range subs {
		byID[s.ID] = append(byID[s.ID], i)
	}
	out := make([]Judged, len(subs))
	ended := 0
	for ended < len(subs) {
		e, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, errors.New("the daemon ended the batch before every submission had its judgement")
		}
		if err != nil {
			return out, fromStatus(err)
		}
		var j Judged
		switch e := e.GetEvent().(type) {
		case *pb.EvaluateEvent_CaseDone:
			if ev.Case != nil {
				ev.Case(e.CaseDone.GetSubmissionId(), wire.CaseResultFromProto(e.CaseDone.GetCase()))
			}
			continue
		case *pb.EvaluateEvent_Judgement:
			j = Judged{SubmissionID: e.Judgement.GetSubmissionId(), Judgement: wire.JudgementFromProto(e.Judgement)}
		case *pb.EvaluateEvent_Error:
			st := status.New(codes.Code(e.Error.GetCode()), e.Error.GetMessage())
			j = Judged{SubmissionID: e.Error.GetSubmissionId(), Err: fromStatus(st.Err())}
		default:
			continue
		}
		// Submissions that share an id end in the order they were sent.
		if idx := byID[j.SubmissionID]; len(idx) > 0 {
			out[idx[0]], byID[j.SubmissionID] = j, idx[1:]
		}
		ended++
		if ev.Judged != nil {
			ev.Judged(j)
		}
	}
	if err := <-sent; err != nil {
		return out, fromStatus(err)
	}
	return out, nil
}
