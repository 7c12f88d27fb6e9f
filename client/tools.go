package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"

	"github.com/containerd/errdefs"

	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/server/wire"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/tools"
)

// CallerTool is a tool the caller declares with a run and answers itself:
// the program calls it as caller.NAME.
type CallerTool struct {
	tools.Tool
	// Call runs the tool with its arguments (checked against the
	// tool's schema) and the call's idempotency key; an error reaches
	// the program as ToolFailed with its text.
	Call func(ctx context.Context, args json.RawMessage, idempotencyKey string) (json.RawMessage, error)
}

// ConfirmFunc answers whether a high-risk call may go on; tool is its
// full name and args its arguments, writeOnly ones as their digest.
type ConfirmFunc func(ctx context.Context, tool string, args json.RawMessage) bool

// RunWithTools runs req, whose program may call declared (and the
// tools req names), answering each call of a declared tool with its
// Call and each confirmation with confirm, and reports the run's events
// to obs until its result. Without confirm, high-risk calls are refused
// as needs_confirmation, never asked.
func (c *Client) RunWithTools(ctx context.Context, req run.Request, declared []CallerTool, confirm ConfirmFunc, obs run.Observer) (run.Result, error) {
	side := tools.CallerSide{Provider: callerFuncs(declared)}
	for _, t := range declared {
		side.Tools = append(side.Tools, t.Tool)
	}
	if confirm != nil {
		side.Confirmer = confirmFunc(confirm)
	}
	return c.runWithSide(ctx, req, side, obs)
}

// callerFuncs answers the calls of declared tools with their functions.
type callerFuncs []CallerTool

func (f callerFuncs) Call(ctx context.Context, tool string, args json.RawMessage, key string) (json.RawMessage, error) {
	for _, t := range f {
		if t.Name == tool && t.Call != nil {
			return t.Call(ctx, args, key)
		}
	}
	return nil, errors.New("the caller has no tool " + tool)
}

type confirmFunc ConfirmFunc

func (f confirmFunc) Confirm(ctx context.Context, c tools.Call) (bool, error) {
	return f(ctx, c.Tool, c.Arguments), nil
}

// hasSide says whether a run's context brings a caller's side: its own
// tools or a way to confirm (an MCP host that can be asked, say).
func hasSide(side tools.CallerSide) bool {
	return len(side.Tools) > 0 || side.Provider != nil || side.Confirmer != nil
}

// runWithSide runs req on a RunWithTools stream whose questions side
// answers.
func (c *Client) runWithSide(ctx context.Context, req run.Request, side tools.CallerSide, obs run.Observer) (run.Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.c.RunWithTools(ctx)
	if err != nil {
		return run.Result{}, fromStatus(err)
	}
	first := &pb.RunWithToolsRequest{Confirms: side.Confirmer != nil}
	opts := wire.OptionsToProto(req.Options)
	switch {
	case req.Program != nil:
		first.Message = &pb.RunWithToolsRequest_Code{Code: &pb.RunCodeRequest{Language: req.Program.Language, Code: req.Program.Code, Options: opts}}
	case req.Command != nil:
		first.Message = &pb.RunWithToolsRequest_Command{Command: &pb.RunCommandRequest{Argv: req.Command.Argv, Shell: req.Command.Shell, Options: opts}}
	default:
		return run.Result{}, errdefs.ErrInvalidArgument.WithMessage("request: set exactly one of a program and a command")
	}
	for _, t := range side.Tools {
		first.Tools = append(first.Tools, wire.ToolSpecToProto(t))
	}
	var sendMu sync.Mutex
	send := func(m *pb.RunWithToolsRequest) {
		sendMu.Lock()
		defer sendMu.Unlock()
		// A send that fails means the stream is over: Recv says why.
		_ = stream.Send(m)
	}
	send(first)
	var answering sync.WaitGroup
	defer answering.Wait()
	defer cancel()
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return run.Result{}, errdefs.ErrUnavailable.WithMessage("the daemon ended the run's stream without a result")
		}
		if err != nil {
			return run.Result{}, fromStatus(err)
		}
		switch e := ev.GetEvent().(type) {
		case *pb.RunWithToolsEvent_ToolCall:
			answering.Add(1)
			go func() {
				defer answering.Done()
				send(answer(ctx, side.Provider, e.ToolCall))
			}()
		case *pb.RunWithToolsEvent_Confirm:
			answering.Add(1)
			go func() {
				defer answering.Done()
				yes := false
				if side.Confirmer != nil {
					yes, _ = side.Confirmer.Confirm(ctx, tools.Call{Tool: e.Confirm.GetTool(), Arguments: json.RawMessage(e.Confirm.GetArgumentsJson())})
				}
				send(&pb.RunWithToolsRequest{Message: &pb.RunWithToolsRequest_Confirmation{Confirmation: &pb.Confirmation{CallId: e.Confirm.GetCallId(), Confirmed: yes}}})
			}()
		case *pb.RunWithToolsEvent_Run:
			if res, done, err := observe(e.Run, obs); done || err != nil {
				return res, err
			}
		}
	}
}

// answer runs the caller's tool a call names.
func answer(ctx context.Context, a tools.Answerer, call *pb.ToolCall) *pb.RunWithToolsRequest {
	r := &pb.ToolResult{CallId: call.GetCallId()}
	if a == nil {
		r.Error = "the caller has no tool " + call.GetTool()
	} else if res, err := a.Call(ctx, call.GetTool(), json.RawMessage(call.GetArgumentsJson()), call.GetIdempotencyKey()); err != nil {
		r.Error = err.Error()
	} else {
		r.ResultJson = string(res)
	}
	return &pb.RunWithToolsRequest{Message: &pb.RunWithToolsRequest_ToolResult{ToolResult: r}}
}
