package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"

	"github.com/containerd/errdefs"

	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
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

var riskToProto = map[tools.Risk]pb.ToolRisk{tools.RiskRead: pb.ToolRisk_TOOL_RISK_READ, tools.RiskWrite: pb.ToolRisk_TOOL_RISK_WRITE, tools.RiskHigh: pb.ToolRisk_TOOL_RISK_HIGH}

// RunWithTools runs req, whose program may call declared (and the
// tools req names), answering each call of a declared tool with its
// Call and each confirmation with confirm, and
// reports the run's events to obs until its result. Without confirm,
// high-risk calls are refused as needs_confirmation, never asked.
func (c *Client) RunWithTools(ctx context.Context, req run.Request, declared []CallerTool, confirm ConfirmFunc, obs run.Observer) (run.Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.c.RunWithTools(ctx)
	if err != nil {
		return run.Result{}, fromStatus(err)
	}
	first := &pb.RunWithToolsRequest{Confirms: confirm != nil}
	opts := optionsToProto(req.Options)
	switch {
	case req.Program != nil:
		first.Message = &pb.RunWithToolsRequest_Code{Code: &pb.RunCodeRequest{Language: req.Program.Language, Code: req.Program.Code, Options: opts}}
	case req.Command != nil:
		first.Message = &pb.RunWithToolsRequest_Command{Command: &pb.RunCommandRequest{Argv: req.Command.Argv, Shell: req.Command.Shell, Options: opts}}
	default:
		return run.Result{}, errdefs.ErrInvalidArgument.WithMessage("request: set exactly one of a program and a command")
	}
	byName := map[string]CallerTool{}
	for _, t := range declared {
		byName[t.Name] = t
		first.Tools = append(first.Tools, &pb.ToolSpec{Name: t.Name, Description: t.Description, InputSchemaJson: string(t.InputSchema), Risk: riskToProto[t.Risk]})
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
				send(answer(ctx, byName, e.ToolCall))
			}()
		case *pb.RunWithToolsEvent_Confirm:
			answering.Add(1)
			go func() {
				defer answering.Done()
				yes := confirm != nil && confirm(ctx, e.Confirm.GetTool(), json.RawMessage(e.Confirm.GetArgumentsJson()))
				send(&pb.RunWithToolsRequest{Message: &pb.RunWithToolsRequest_Confirmation{Confirmation: &pb.Confirmation{CallId: e.Confirm.GetCallId(), Confirmed: yes}}})
			}()
		case *pb.RunWithToolsEvent_Run:
			var err error
			switch r := e.Run.GetEvent().(type) {
			case *pb.RunEvent_Started:
				err = obs.Started(startedFromProto(r.Started))
			case *pb.RunEvent_Stdout:
				err = obs.Output(run.Stdout, r.Stdout)
			case *pb.RunEvent_Stderr:
				err = obs.Output(run.Stderr, r.Stderr)
			case *pb.RunEvent_Result:
				return resultFromProto(r.Result), nil
			}
			if err != nil {
				return run.Result{}, err
			}
		}
	}
}

// answer runs the declared tool a call names.
func answer(ctx context.Context, byName map[string]CallerTool, call *pb.ToolCall) *pb.RunWithToolsRequest {
	r := &pb.ToolResult{CallId: call.GetCallId()}
	t, ok := byName[call.GetTool()]
	if !ok || t.Call == nil {
		r.Error = "the caller has no tool " + call.GetTool()
	} else if res, err := t.Call(ctx, json.RawMessage(call.GetArgumentsJson()), call.GetIdempotencyKey()); err != nil {
		r.Error = err.Error()
	} else {
		r.ResultJson = string(res)
	}
	return &pb.RunWithToolsRequest{Message: &pb.RunWithToolsRequest_ToolResult{ToolResult: r}}
}
