package server

import (
	"errors"
	"io"
	"sync"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/server/wire"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/judge"
)

// Evaluate judges a batch of submissions as they arrive: at most twice the
// daemon's concurrency of them are held at once (the rest wait in the
// transport), their runs within the daemon's concurrency, each event sent
// as soon as it is known.
func (s *Server) Evaluate(stream grpc.BidiStreamingServer[pb.EvaluateRequest, pb.EvaluateEvent]) error {
	ctx := stream.Context()
	slots := s.svc.EvaluateSlots()
	held := make(chan struct{}, 2*cap(slots))
	var (
		mu      sync.Mutex
		sendErr error
		wg      sync.WaitGroup
	)
	send := func(ev *pb.EvaluateEvent) {
		mu.Lock()
		defer mu.Unlock()
		if sendErr == nil {
			sendErr = stream.Send(ev)
		}
	}
	defer wg.Wait()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		select {
		case held <- struct{}{}:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-held }()
			id := req.GetSubmission().GetId()
			j, err := s.evaluate(stream, req.GetSubmission(), slots, func(c judge.CaseResult) {
				send(&pb.EvaluateEvent{Event: &pb.EvaluateEvent_CaseDone{CaseDone: &pb.CaseProgress{SubmissionId: id, Case: wire.CaseResultToProto(c)}}})
			})
			if err != nil {
				send(&pb.EvaluateEvent{Event: &pb.EvaluateEvent_Error{Error: submissionError(id, err)}})
				return
			}
			send(&pb.EvaluateEvent{Event: &pb.EvaluateEvent_Judgement{Judgement: wire.JudgementToProto(j)}})
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	return sendErr
}

func (s *Server) evaluate(stream grpc.BidiStreamingServer[pb.EvaluateRequest, pb.EvaluateEvent], p *pb.Submission, slots chan struct{}, progress func(judge.CaseResult)) (judge.Judgement, error) {
	if p == nil {
		return judge.Judgement{}, status.Error(codes.InvalidArgument, "submission: is not set")
	}
	sub, err := wire.SubmissionFromProto(p)
	if err != nil {
		return judge.Judgement{}, err
	}
	return s.svc.Evaluate(stream.Context(), sub, task.EvaluateOptions{Slots: slots, Progress: progress})
}

// submissionError is the error a submission alone would have failed with.
func submissionError(id string, err error) *pb.SubmissionError {
	st := status.Convert(ToStatus(err))
	out := &pb.SubmissionError{SubmissionId: id, Code: int32(st.Code()), Message: st.Message()}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			out.RetryAfter = ri.GetRetryDelay()
		}
	}
	return out
}
