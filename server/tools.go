package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/server/wire"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/tools"
)

// RunWithTools runs a program whose calls of the caller's declared tools,
// and whose high-risk calls' confirmations, travel on this stream.
func (s *Server) RunWithTools(stream grpc.BidiStreamingServer[pb.RunWithToolsRequest, pb.RunWithToolsEvent]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	req, err := firstOfRunWithTools(first)
	if err != nil {
		return ToStatus(err)
	}
	declared, err := wire.ToolSpecsFromProto(first.GetTools())
	if err != nil {
		return ToStatus(err)
	}
	b := &toolBridge{stream: stream, pending: map[string]chan *pb.RunWithToolsRequest{}}
	go b.receive()
	side := tools.CallerSide{Tools: declared, Provider: b}
	if first.GetConfirms() {
		side.Confirmer = b
	}
	req.Caller = side
	res, err := s.svc.Run(stream.Context(), req, streamObserver{b.sendRun})
	return s.endStream(b.sendRun, res, err)
}

// firstOfRunWithTools is the run the first message asks for.
func firstOfRunWithTools(m *pb.RunWithToolsRequest) (run.Request, error) {
	var o *pb.RunOptions
	var req run.Request
	switch r := m.GetMessage().(type) {
	case *pb.RunWithToolsRequest_Code:
		o = r.Code.GetOptions()
		req.Program = &run.Program{Language: r.Code.GetLanguage(), Code: r.Code.GetCode()}
	case *pb.RunWithToolsRequest_Command:
		o = r.Command.GetOptions()
		req.Command = &run.Command{Argv: r.Command.GetArgv(), Shell: r.Command.GetShell()}
	default:
		return run.Request{}, run.Invalid("message", "the first message is the run: code or command")
	}
	if o.GetDetach() {
		return run.Request{}, run.Invalid("detach", "a run whose tools the caller answers cannot go on without the caller")
	}
	opts, err := wire.OptionsFromProto(o)
	req.Options = opts
	return req, err
}

// toolBridge is the caller's side of a run on a RunWithTools stream: a
// tools.Answerer of its declared tools and a tools.Confirmer, each
// question an event with a call_id that the caller answers.
type toolBridge struct {
	stream grpc.BidiStreamingServer[pb.RunWithToolsRequest, pb.RunWithToolsEvent]
	sendMu sync.Mutex

	mu      sync.Mutex
	next    int
	pending map[string]chan *pb.RunWithToolsRequest
	gone    error // why the caller can no longer answer
}

// send sends one event; the stream's Send is not for concurrent use.
func (b *toolBridge) send(ev *pb.RunWithToolsEvent) error {
	b.sendMu.Lock()
	defer b.sendMu.Unlock()
	return b.stream.Send(ev)
}

func (b *toolBridge) sendRun(ev *pb.RunEvent) error {
	return b.send(&pb.RunWithToolsEvent{Event: &pb.RunWithToolsEvent_Run{Run: ev}})
}

// receive passes each answer to the question with its call_id, until the
// caller closes its side.
func (b *toolBridge) receive() {
	for {
		m, err := b.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the caller closed its side of the stream")
			}
			b.mu.Lock()
			b.gone = err
			for id, ch := range b.pending {
				close(ch)
				delete(b.pending, id)
			}
			b.mu.Unlock()
			return
		}
		var id string
		switch a := m.GetMessage().(type) {
		case *pb.RunWithToolsRequest_ToolResult:
			id = a.ToolResult.GetCallId()
		case *pb.RunWithToolsRequest_Confirmation:
			id = a.Confirmation.GetCallId()
		default:
			continue // another run in the stream is not a thing: dropped
		}
		b.mu.Lock()
		ch, ok := b.pending[id]
		delete(b.pending, id)
		b.mu.Unlock()
		if ok {
			ch <- m
		}
	}
}

// ask sends the event that ev makes of a new call_id, and waits for its
// answer until ctx is done.
func (b *toolBridge) ask(ctx context.Context, ev func(id string) *pb.RunWithToolsEvent) (*pb.RunWithToolsRequest, error) {
	b.mu.Lock()
	if b.gone != nil {
		b.mu.Unlock()
		return nil, b.gone
	}
	b.next++
	id := "c" + strconv.Itoa(b.next)
	ch := make(chan *pb.RunWithToolsRequest, 1)
	b.pending[id] = ch
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.pending, id)
		b.mu.Unlock()
	}()
	if err := b.send(ev(id)); err != nil {
		return nil, err
	}
	select {
	case m, ok := <-ch:
		if !ok {
			b.mu.Lock()
			defer b.mu.Unlock()
			return nil, b.gone
		}
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Call asks the caller to run one of its tools.
func (b *toolBridge) Call(ctx context.Context, tool string, args json.RawMessage, key string) (json.RawMessage, error) {
	m, err := b.ask(ctx, func(id string) *pb.RunWithToolsEvent {
		return &pb.RunWithToolsEvent{Event: &pb.RunWithToolsEvent_ToolCall{ToolCall: &pb.ToolCall{CallId: id, Tool: tool, ArgumentsJson: string(args), IdempotencyKey: key}}}
	})
	if err != nil {
		return nil, err
	}
	r := m.GetToolResult()
	if r == nil {
		return nil, status.Error(codes.InvalidArgument, "the caller answered a tool call with a confirmation")
	}
	switch {
	case r.GetError() != "":
		return nil, &tools.Failure{Message: r.GetError()}
	case r.GetResultJson() == "":
		return json.RawMessage("null"), nil
	case !json.Valid([]byte(r.GetResultJson())):
		return nil, &tools.Failure{Message: "the caller's result is not JSON"}
	}
	return json.RawMessage(r.GetResultJson()), nil
}

// Confirm asks the caller whether a high-risk call may go on.
func (b *toolBridge) Confirm(ctx context.Context, c tools.Call) (bool, error) {
	var deadline *timestamppb.Timestamp
	if d, ok := ctx.Deadline(); ok {
		deadline = timestamppb.New(d)
	}
	m, err := b.ask(ctx, func(id string) *pb.RunWithToolsEvent {
		return &pb.RunWithToolsEvent{Event: &pb.RunWithToolsEvent_Confirm{Confirm: &pb.ConfirmRequest{CallId: id, Tool: c.Tool, ArgumentsJson: string(c.Arguments), Deadline: deadline}}}
	})
	if err != nil {
		return false, err
	}
	conf := m.GetConfirmation()
	if conf == nil {
		return false, errors.New("the caller answered a confirmation with a tool result")
	}
	return conf.GetConfirmed(), nil
}
