package client

import (
	"context"
	"math/rand/v2"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Retry is how a client treats the daemon's "busy, retry in N" and
// "draining" refusals, the same in every client sandboxd ships (Go, the
// CLI, Python, TypeScript): a refusal that carries RetryInfo is made again
// after the delay it names, stretched by up to a fifth at random so that
// refused callers do not return in step, for as long as Within allows.
//
// Only refusals are retried, and they are always safe to retry: the daemon
// refuses a run before it starts one, so a run is never made twice.
type Retry struct {
	// Within bounds the time spent retrying, from the first refusal; a
	// wait that would end past it (or past the call's deadline) is not
	// begun, and the refusal is the call's answer. Zero: no retries.
	Within time.Duration
	// Waiting, when set, is told of each wait before it begins: the
	// refusal and how long the client waits.
	Waiting func(refusal error, wait time.Duration)
}

// DefaultRetryWithin is how long the CLI, and the Python and TypeScript
// clients by default, keep retrying refused calls.
const DefaultRetryWithin = time.Minute

// RetryDelay is the delay a refusal asks for: the RetryInfo of a
// RESOURCE_EXHAUSTED or UNAVAILABLE status. ok is false for any other
// error, which is not retried.
func RetryDelay(err error) (delay time.Duration, ok bool) {
	st, isStatus := status.FromError(err)
	if !isStatus || (st.Code() != codes.ResourceExhausted && st.Code() != codes.Unavailable) {
		return 0, false
	}
	for _, d := range st.Details() {
		if info, isInfo := d.(*errdetails.RetryInfo); isInfo {
			return info.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// retrier is one call's retrying: it holds the deadline set by the first
// refusal.
type retrier struct {
	policy   Retry
	deadline time.Time
}

// again waits out err's delay and says whether to make the call again:
// false, at once, when err is not a refusal, when the wait would end past
// the deadline, or when ctx ends first.
func (r *retrier) again(ctx context.Context, err error) bool {
	delay, ok := RetryDelay(err)
	if !ok || r.policy.Within <= 0 {
		return false
	}
	now := time.Now()
	if r.deadline.IsZero() {
		r.deadline = now.Add(r.policy.Within)
	}
	wait := delay + time.Duration(rand.Int64N(int64(delay)/5+1))
	if d, has := ctx.Deadline(); now.Add(wait).After(r.deadline) || has && now.Add(wait).After(d) {
		return false
	}
	if r.policy.Waiting != nil {
		r.policy.Waiting(err, wait)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// unary retries refused unary calls.
func (p Retry) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	r := retrier{policy: p}
	for {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil || !r.again(ctx, err) {
			return err
		}
	}
}

// stream retries refused server-streaming calls (runs, attaches): their
// refusal is the stream's first answer, before any message, so the
// request is sent again on a new stream. Bidirectional streams are not
// retried: what their caller sent cannot be sent again for it.
func (p Retry) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || desc.ClientStreams || !desc.ServerStreams {
		return cs, err
	}
	return &retryingStream{ClientStream: cs, ctx: ctx, retrier: retrier{policy: p},
		reopen: func() (grpc.ClientStream, error) { return streamer(ctx, desc, cc, method, opts...) }}, nil
}

type retryingStream struct {
	grpc.ClientStream
	ctx      context.Context
	retrier  retrier
	reopen   func() (grpc.ClientStream, error)
	req      any  // the one request, to send again
	received bool // a message came: the call was not refused
}

func (s *retryingStream) SendMsg(m any) error {
	s.req = m
	return s.ClientStream.SendMsg(m)
}

func (s *retryingStream) RecvMsg(m any) error {
	for {
		err := s.ClientStream.RecvMsg(m)
		if err == nil {
			s.received = true
			return nil
		}
		if s.received || s.req == nil || !s.retrier.again(s.ctx, err) {
			return err
		}
		cs, rerr := s.reopen()
		if rerr != nil {
			return err
		}
		if rerr = cs.SendMsg(s.req); rerr == nil {
			rerr = cs.CloseSend()
		}
		if rerr != nil {
			return err
		}
		s.ClientStream = cs
	}
}
