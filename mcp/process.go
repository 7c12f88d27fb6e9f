package mcp

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
)

// A host gets three tools for a session's background work: start_process,
// read_process (which also stops one) and open_port. A long process needs
// no MCP task: it is itself the handle, read_process with wait_seconds the
// poll, and its offsets, given back by the model, the only state, so that
// nothing is kept per transport.

// StartProcessInput are start_process's arguments.
type StartProcessInput struct {
	SessionID   string  `json:"session_id" jsonschema:"the session to run it in"`
	Command     string  `json:"command" jsonschema:"a shell command line, e.g. npm run dev or python3 -m http.server 8000"`
	WaitSeconds float64 `json:"wait_seconds,omitempty" jsonschema:"how long to wait for its first output (default 1, at most 30)"`
}

// ReadProcessInput are read_process's arguments.
type ReadProcessInput struct {
	SessionID    string  `json:"session_id"`
	ProcessID    string  `json:"process_id"`
	StdoutOffset int64   `json:"stdout_offset,omitempty" jsonschema:"where to read stdout from: the next_stdout_offset of the last read (0: the start)"`
	StderrOffset int64   `json:"stderr_offset,omitempty" jsonschema:"where to read stderr from: the next_stderr_offset of the last read"`
	WaitSeconds  float64 `json:"wait_seconds,omitempty" jsonschema:"how long to wait for new output while it runs (at most 30)"`
	Signal       string  `json:"signal,omitempty" jsonschema:"send it a signal first: TERM to stop it, KILL, INT (Ctrl-C) or HUP"`
}

// ProcessOutput is start_process's and read_process's result.
type ProcessOutput struct {
	ProcessID        string `json:"process_id"`
	State            string `json:"state" jsonschema:"RUNNING, EXITED or KILLED (ended with its session)"`
	ExitCode         *int   `json:"exit_code,omitempty"`
	Stdout           string `json:"stdout"`
	Stderr           string `json:"stderr"`
	NextStdoutOffset int64  `json:"next_stdout_offset"`
	NextStderrOffset int64  `json:"next_stderr_offset"`
	// Dropped counts what the daemon no longer kept before this output.
	Dropped int64 `json:"dropped_bytes,omitempty"`
}

// OpenPortInput are open_port's arguments.
type OpenPortInput struct {
	SessionID string `json:"session_id"`
	Port      int    `json:"port" jsonschema:"the port a server in the session listens on"`
}

// PortOutput is open_port's result.
type PortOutput struct {
	Port int    `json:"port"`
	URL  string `json:"url" jsonschema:"where a browser or an HTTP client reaches it; the URL is its only key"`
}

var signals = map[string]int{"HUP": 1, "INT": 2, "KILL": 9, "TERM": 15}

// processTools builds start_process, read_process and open_port.
func processTools() (start, read, open *mcpsdk.Tool, err error) {
	startIn, err := jsonschema.For[StartProcessInput](nil)
	if err != nil {
		return nil, nil, nil, err
	}
	readIn, err := jsonschema.For[ReadProcessInput](nil)
	if err != nil {
		return nil, nil, nil, err
	}
	readIn.Properties["signal"].Enum = []any{"", "TERM", "KILL", "INT", "HUP"}
	out, err := jsonschema.For[ProcessOutput](nil)
	if err != nil {
		return nil, nil, nil, err
	}
	openIn, err := jsonschema.For[OpenPortInput](nil)
	if err != nil {
		return nil, nil, nil, err
	}
	openIn.Properties["port"].Minimum, openIn.Properties["port"].Maximum = ptr(1.0), ptr(65535.0)
	portOut, err := jsonschema.For[PortOutput](nil)
	if err != nil {
		return nil, nil, nil, err
	}
	start = &mcpsdk.Tool{
		Name:  "start_process",
		Title: "Start a background process",
		Description: "Start a long-running command in a session's background (a dev server, a watcher, a build): it runs beside run_code and run_command " +
			"until it exits, is stopped with read_process, or the session ends. Returns its process_id and its first output; read more with read_process.",
		InputSchema: startIn, OutputSchema: out,
		Annotations: &mcpsdk.ToolAnnotations{Title: "Start a background process", DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
	}
	read = &mcpsdk.Tool{
		Name:  "read_process",
		Title: "Read or stop a background process",
		Description: "Read a background process's output since the offsets of the last read, waiting up to wait_seconds for more, " +
			"and whether it still runs; with signal TERM, stop it first.",
		InputSchema: readIn, OutputSchema: out,
		Annotations: &mcpsdk.ToolAnnotations{Title: "Read or stop a background process", DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
	}
	open = &mcpsdk.Tool{
		Name:  "open_port",
		Title: "Open a session's port",
		Description: "Give a server listening on a port in a session a URL, served by sandboxd's inbound proxy (HTTP and WebSocket), " +
			"for the person you work with to open or for an HTTP client. The session's own network stays as it is.",
		InputSchema: openIn, OutputSchema: portOut,
		Annotations: &mcpsdk.ToolAnnotations{Title: "Open a session's port", DestructiveHint: ptr(false), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}
	return start, read, open, nil
}

// seconds turns a wait in seconds into a duration, refused by name when
// out of range.
func seconds(field string, s float64) (time.Duration, error) {
	if !(s >= 0 && s <= task.MaxProcessWait.Seconds()) {
		return 0, fmt.Errorf("invalid argument: %s: %v is not between 0 and %v", field, s, task.MaxProcessWait.Seconds())
	}
	return time.Duration(math.Round(s*1000)) * time.Millisecond, nil
}

func (h *handlers) startProcess(ctx context.Context, req *mcpsdk.CallToolRequest, in StartProcessInput) (*mcpsdk.CallToolResult, *ProcessOutput, error) {
	if in.WaitSeconds == 0 {
		in.WaitSeconds = 1
	}
	wait, err := seconds("wait_seconds", in.WaitSeconds)
	if err != nil {
		return nil, nil, err
	}
	ctx = toolCall(ctx, req)
	p, err := h.engine.StartProcess(ctx, session.ProcessRequest{SessionID: in.SessionID, Command: run.Command{Shell: in.Command}})
	if err != nil {
		return nil, nil, toolError(err)
	}
	return h.readProcess(ctx, nil, ReadProcessInput{SessionID: in.SessionID, ProcessID: p.ID, WaitSeconds: wait.Seconds()})
}

func (h *handlers) readProcess(ctx context.Context, req *mcpsdk.CallToolRequest, in ReadProcessInput) (*mcpsdk.CallToolResult, *ProcessOutput, error) {
	wait, err := seconds("wait_seconds", in.WaitSeconds)
	if err != nil {
		return nil, nil, err
	}
	if req != nil {
		ctx = toolCall(ctx, req)
	}
	if in.Signal != "" {
		n, ok := signals[in.Signal]
		if !ok {
			return nil, nil, fmt.Errorf("invalid argument: signal: %q is not TERM, KILL, INT or HUP", in.Signal)
		}
		if _, err := h.engine.SignalProcess(ctx, in.SessionID, in.ProcessID, n); err != nil {
			return nil, nil, toolError(err)
		}
		// Its end is what the caller wants to read.
		wait = max(wait, time.Second)
	}
	from := session.Offsets{Stdout: in.StdoutOffset, Stderr: in.StderrOffset}
	o, err := h.engine.ReadProcessOutput(ctx, in.SessionID, in.ProcessID, from, int(h.opts.OutputBytes), wait)
	if err != nil {
		return nil, nil, toolError(err)
	}
	if in.Signal != "" && o.Info.State == session.Running {
		// Up to wait for the end the signal brings.
		if info, err := h.waitEnd(ctx, in, wait); err == nil {
			o.Info = info
		}
	}
	out := &ProcessOutput{ProcessID: o.Info.ID, State: string(o.Info.State), Stdout: strings.ToValidUTF8(string(o.Stdout), "\uFFFD"),
		Stderr: strings.ToValidUTF8(string(o.Stderr), "\uFFFD"), NextStdoutOffset: o.Next.Stdout, NextStderrOffset: o.Next.Stderr,
		Dropped: o.Start.Stdout - from.Stdout + o.Start.Stderr - from.Stderr}
	if o.Info.State != session.Running {
		out.ExitCode = &o.Info.ExitCode
	}
	var b strings.Builder
	fmt.Fprintf(&b, "process %s: %s", out.ProcessID, out.State)
	if out.ExitCode != nil {
		fmt.Fprintf(&b, " with exit code %d", *out.ExitCode)
	}
	if out.Dropped > 0 {
		fmt.Fprintf(&b, "; %d bytes before this output are no longer kept", out.Dropped)
	}
	fmt.Fprintf(&b, "; read on from stdout_offset %d and stderr_offset %d", out.NextStdoutOffset, out.NextStderrOffset)
	if out.Stdout != "" {
		b.WriteString("\n--- stdout ---\n" + out.Stdout)
	}
	if out.Stderr != "" {
		b.WriteString("\n--- stderr ---\n" + out.Stderr)
	}
	return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: b.String()}}}, out, nil
}

// waitEnd waits up to wait for a signalled process to end.
func (h *handlers) waitEnd(ctx context.Context, in ReadProcessInput, wait time.Duration) (session.ProcessInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return h.engine.WaitProcess(ctx, in.SessionID, in.ProcessID)
}

func (h *handlers) openPort(ctx context.Context, req *mcpsdk.CallToolRequest, in OpenPortInput) (*mcpsdk.CallToolResult, *PortOutput, error) {
	p, err := h.engine.OpenPort(toolCall(ctx, req), in.SessionID, in.Port)
	if err != nil {
		return nil, nil, toolError(err)
	}
	text := fmt.Sprintf("port %d of session %s is at %s", p.Port, in.SessionID, p.URL)
	return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: text}}}, &PortOutput{Port: p.Port, URL: p.URL}, nil
}
