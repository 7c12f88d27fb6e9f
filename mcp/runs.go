package mcp

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/jsonschema-go/jsonschema"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/task/run"
)

// statusRunning is the status of a run that outlasted a tool call's wait.
const statusRunning = "RUNNING"

// WaitRunInput are wait_run's arguments.
type WaitRunInput struct {
	RunID        string `json:"run_id" jsonschema:"the run, from a RUNNING result"`
	StdoutOffset int64  `json:"stdout_offset,omitempty" jsonschema:"bytes of stdout already seen: the result carries what follows"`
	StderrOffset int64  `json:"stderr_offset,omitempty" jsonschema:"bytes of stderr already seen"`
}

// CancelRunInput are cancel_run's arguments.
type CancelRunInput struct {
	RunID string `json:"run_id" jsonschema:"the run to stop"`
}

// CancelRunOutput is cancel_run's result.
type CancelRunOutput struct {
	RunID string `json:"run_id"`
	State string `json:"state" jsonschema:"RUNNING when the call stopped it, FINISHED when it had ended already"`
}

// runTools are the tools that follow a run past its call: wait_run and
// cancel_run.
func runTools() (wait, cancel *mcpsdk.Tool, err error) {
	waitIn, err := jsonschema.For[WaitRunInput](nil)
	if err != nil {
		return nil, nil, err
	}
	out, err := runOutputSchema()
	if err != nil {
		return nil, nil, err
	}
	cancelIn, err := jsonschema.For[CancelRunInput](nil)
	if err != nil {
		return nil, nil, err
	}
	cancelOut, err := jsonschema.For[CancelRunOutput](nil)
	if err != nil {
		return nil, nil, err
	}
	for _, in := range []*jsonschema.Schema{waitIn.Properties["stdout_offset"], waitIn.Properties["stderr_offset"]} {
		in.Minimum = ptr(0.0)
	}
	wait = &mcpsdk.Tool{
		Name:  "wait_run",
		Title: "Wait for a run",
		Description: "Wait for a run that a run_code or run_command call answered as RUNNING: the result is the run's, as those tools give it, " +
			"or RUNNING again with the output since the offsets when it runs on; pass the offsets it names to the next wait_run.",
		InputSchema:  waitIn,
		OutputSchema: out,
		Annotations:  &mcpsdk.ToolAnnotations{Title: "Wait for a run", ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}
	cancel = &mcpsdk.Tool{
		Name:         "cancel_run",
		Title:        "Stop a run",
		Description:  "Stop a running run (its sandbox is killed); its result is then CANCELLED.",
		InputSchema:  cancelIn,
		OutputSchema: cancelOut,
		Annotations:  &mcpsdk.ToolAnnotations{Title: "Stop a run", DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}
	return wait, cancel, nil
}

// errWaitOver ends a tasks/get's wait.
var errWaitOver = errors.New("the wait is over")

func (h *handlers) waitRun(ctx context.Context, req *mcpsdk.CallToolRequest, in WaitRunInput) (*mcpsdk.CallToolResult, *RunOutput, error) {
	if req != nil && req.Params != nil && req.Params.RequestState != "" {
		return h.resume(ctx, req)
	}
	return h.attach(ctx, req, in.RunID, [2]int64{in.StdoutOffset, in.StderrOffset}, h.asks.get(in.RunID))
}

func (h *handlers) cancelRun(ctx context.Context, req *mcpsdk.CallToolRequest, in CancelRunInput) (*mcpsdk.CallToolResult, *CancelRunOutput, error) {
	st, err := h.engine.Cancel(toolCall(ctx, req), in.RunID)
	if err != nil {
		return nil, nil, toolError(err)
	}
	out := &CancelRunOutput{RunID: in.RunID, State: "FINISHED"}
	if st == run.Running {
		out.State = "RUNNING"
	}
	return nil, out, nil
}

// stillRunning answers for a run that outlasted the call's wait: its id,
// the output seen from the offsets on, and the offsets to wait from next.
func stillRunning(id string, stdoutOffset, stderrOffset int64, obs *observer) (*mcpsdk.CallToolResult, *RunOutput, error) {
	obs.stop()
	stdout, _ := validText(obs.text(run.Stdout))
	stderr, _ := validText(obs.text(run.Stderr))
	out := &RunOutput{
		Status: statusRunning, RunID: id, Stdout: stdout, Stderr: stderr, Files: []OutputFile{},
		StdoutBytes: stdoutOffset + int64(len(obs.text(run.Stdout))), StderrBytes: stderrOffset + int64(len(obs.text(run.Stderr))),
	}
	out.Message = fmt.Sprintf("still running: call wait_run with run_id %q, stdout_offset %d and stderr_offset %d to wait for more, or cancel_run to stop it",
		id, out.StdoutBytes, out.StderrBytes)
	text := fmt.Sprintf("status: RUNNING (%s)\n--- stdout so far ---\n%s\n--- stderr so far ---\n%s\n", out.Message, stdout, stderr)
	return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: text}}}, out, nil
}
