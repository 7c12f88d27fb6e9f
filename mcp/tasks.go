package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/containerd/errdefs"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/run"
)

// The Tasks extension (io.modelcontextprotocol/tasks, 2026-07-28): a
// run_code or run_command call whose run outlasts the wait answers with a
// task whose id is the run's, when its request declares the extension;
// tasks/get, tasks/update and tasks/cancel then follow the run by that id
// and the caller's identity, like wait_run and cancel_run do. The SDK
// knows none of the three methods and refuses them before any middleware,
// so they are answered in front of it: by taskMethods on the stateless
// HTTP path, and by taskConn on stdio.

const (
	tasksExtension = "io.modelcontextprotocol/tasks"
	// codeMissingCapability is the extension's error for a request that
	// does not declare it.
	codeMissingCapability = -32021
	// taskPollInterval is the polling interval tasks suggest.
	taskPollInterval = time.Second
	// taskPeek is how long tasks/get waits for a run that is about to
	// end, so that a poll just after the end is not answered "working".
	taskPeek = 100 * time.Millisecond
	// outputMeta is the _meta key of a working task's output so far and,
	// in a tasks/get request, of the offsets already seen.
	outputMeta = "sandboxd/output"
)

// taskMethodNames are the extension's methods (v2) this server answers.
var taskMethodNames = []string{"tasks/get", "tasks/update", "tasks/cancel"}

// declaresTasks reports whether a request's own capabilities, as
// 2026-07-28 requests carry them in _meta, name the extension.
func declaresTasks(meta map[string]any) bool {
	caps, _ := meta[mcpsdk.MetaKeyClientCapabilities].(map[string]any)
	ext, _ := caps["extensions"].(map[string]any)
	_, ok := ext[tasksExtension]
	return ok
}

// taskWire is a task as the extension's results carry it.
type taskWire struct {
	Meta          map[string]any `json:"_meta,omitempty"`
	ResultType    string         `json:"resultType"`
	TaskID        string         `json:"taskId"`
	Status        string         `json:"status"`
	StatusMessage string         `json:"statusMessage,omitempty"`
	CreatedAt     string         `json:"createdAt"`
	LastUpdatedAt string         `json:"lastUpdatedAt"`
	// TTLMs is always null: a finished run is kept until KeepFinished
	// newer ones have finished, not for a time (docs/mcp.md).
	TTLMs          *int64                 `json:"ttlMs"`
	PollIntervalMs int64                  `json:"pollIntervalMs"`
	InputRequests  mcpsdk.InputRequestMap `json:"inputRequests,omitempty"`
	Result         json.RawMessage        `json:"result,omitempty"`
}

// The statuses of a task that sandboxd uses: a run's own failure is a
// completed call with isError, not a failed task (which the extension
// keeps for JSON-RPC errors).
const (
	taskWorking       = "working"
	taskInputRequired = "input_required"
	taskCompleted     = "completed"
	taskCancelled     = "cancelled"
)

// newTask is a task of run id as info describes it.
func newTask(resultType, id string, info run.Info) taskWire {
	created := time.Now()
	if info.Started != nil {
		created = info.Started.StartedAt
	}
	return taskWire{ResultType: resultType, TaskID: id, Status: taskWorking, CreatedAt: stamp(created),
		LastUpdatedAt: stamp(time.Now()), PollIntervalMs: taskPollInterval.Milliseconds()}
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// createdTask is a tools/call's CreateTaskResult. The SDK takes results
// of its own types only: the call's result is what makes this one, and
// its _meta (which the SDK fills) is the task's.
type createdTask struct {
	*mcpsdk.CallToolResult
	task taskWire
}

func (t *createdTask) MarshalJSON() ([]byte, error) {
	w := t.task
	w.Meta = t.CallToolResult.Meta
	return json.Marshal(w)
}

// taskSlot is where a tools/call that may answer with a task learns the
// run it became.
type taskSlot struct {
	mu    sync.Mutex
	runID string
}

type taskSlotKey struct{}

// becameTask records that the call's run outlasted the wait, when the
// call may answer with a task; it reports whether it may.
func becameTask(ctx context.Context, runID string) bool {
	slot, _ := ctx.Value(taskSlotKey{}).(*taskSlot)
	if slot == nil {
		return false
	}
	slot.mu.Lock()
	defer slot.mu.Unlock()
	slot.runID = runID
	return true
}

// taskCalls is the receiving middleware of the extension: server/discover
// says the server has it, and a tools/call that declares it and outlasts
// the wait answers with a task.
func (h *handlers) taskCalls(next mcpsdk.MethodHandler) mcpsdk.MethodHandler {
	return func(ctx context.Context, method string, req mcpsdk.Request) (mcpsdk.Result, error) {
		switch {
		case method == "server/discover":
			res, err := next(ctx, method, req)
			if d, ok := res.(*mcpsdk.DiscoverResult); ok && d.Capabilities != nil {
				if d.Capabilities.Extensions == nil {
					d.Capabilities.Extensions = map[string]any{}
				}
				d.Capabilities.Extensions[tasksExtension] = map[string]any{}
			}
			return res, err
		case method != "tools/call" || req.GetParams() == nil || !declaresTasks(req.GetParams().GetMeta()):
			return next(ctx, method, req)
		}
		slot := &taskSlot{}
		res, err := next(context.WithValue(ctx, taskSlotKey{}, slot), method, req)
		slot.mu.Lock()
		id := slot.runID
		slot.mu.Unlock()
		call, ok := res.(*mcpsdk.CallToolResult)
		if err != nil || id == "" || !ok {
			return res, err
		}
		info, err := h.engine.Get(toolCall(ctx, nil), id)
		if err != nil {
			return nil, fmt.Errorf("the run %s outlasted the wait and is gone: %w", id, err)
		}
		return &createdTask{CallToolResult: call, task: newTask("task", id, info)}, nil
	}
}

// taskRequest answers one of the extension's methods for the caller in
// ctx: a result to send, or the JSON-RPC error to send instead.
func (h *handlers) taskRequest(ctx context.Context, method string, params json.RawMessage) (any, *jsonrpc.Error) {
	// tasks/result and tasks/list left the extension in its v2: a client
	// that still sends them learns the method is gone, not what it lacks.
	if !slices.Contains(taskMethodNames, method) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound,
			Message: fmt.Sprintf("%q is not a method of the %s extension; it has %s", method, tasksExtension, strings.Join(taskMethodNames, ", "))}
	}
	var p struct {
		TaskID         string          `json:"taskId"`
		Meta           map[string]any  `json:"_meta"`
		InputResponses json.RawMessage `json:"inputResponses"`
	}
	if len(params) == 0 {
		params = []byte("{}")
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("%s: params: %v", method, err)}
	}
	if !declaresTasks(p.Meta) {
		return nil, &jsonrpc.Error{Code: codeMissingCapability,
			Message: fmt.Sprintf("Missing required client capability: %s needs the request to declare the %s extension in _meta %q",
				method, tasksExtension, mcpsdk.MetaKeyClientCapabilities),
			Data: json.RawMessage(`{"requiredCapabilities":{"extensions":{"` + tasksExtension + `":{}}}}`)}
	}
	if p.TaskID == "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: method + ": taskId: missing; pass the taskId a tools/call answered with"}
	}
	c := access.CallerFrom(ctx)
	c.Method = "mcp " + method
	ctx = access.WithCaller(ctx, c)
	ack := map[string]string{"resultType": "complete"}
	switch method {
	case "tasks/get":
		from, msg := outputOffsets(p.Meta)
		if msg != "" {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "tasks/get: _meta " + outputMeta + ": " + msg}
		}
		return h.getTask(ctx, p.TaskID, from)
	case "tasks/update":
		var responses mcpsdk.InputResponseMap
		if len(p.InputResponses) > 0 {
			if err := json.Unmarshal(p.InputResponses, &responses); err != nil {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
					Message: fmt.Sprintf("tasks/update: inputResponses: want an object of answers keyed by the inputRequests' keys: %v", err)}
			}
		}
		if _, err := h.engine.Get(ctx, p.TaskID); err != nil {
			return nil, taskError(method, err)
		}
		// An answer to a question that does not wait is ignored, as the
		// extension says.
		if a := h.asks.get(p.TaskID); a != nil {
			a.answer(responses)
		}
		return ack, nil
	default: // tasks/cancel
		if _, err := h.engine.Cancel(ctx, p.TaskID); err != nil {
			return nil, taskError(method, err)
		}
		return ack, nil
	}
}

// outputOffsets reads the offsets of output a tasks/get's caller has
// seen, or says what is wrong with them.
func outputOffsets(meta map[string]any) ([2]int64, string) {
	var from [2]int64
	m, ok := meta[outputMeta]
	if !ok {
		return from, ""
	}
	b, _ := json.Marshal(m)
	var o struct {
		Stdout *int64 `json:"stdout_offset"`
		Stderr *int64 `json:"stderr_offset"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return from, fmt.Sprintf("want {\"stdout_offset\": N, \"stderr_offset\": N}: %v", err)
	}
	for i, v := range []*int64{o.Stdout, o.Stderr} {
		if v == nil {
			continue
		}
		if *v < 0 {
			return from, fmt.Sprintf("%d is a negative offset", *v)
		}
		from[i] = *v
	}
	return from, ""
}

// getTask answers tasks/get: the run as a task, with the output since the
// offsets while it runs and, once it ended, the result the tools/call
// would have given.
func (h *handlers) getTask(ctx context.Context, id string, from [2]int64) (any, *jsonrpc.Error) {
	info, err := h.engine.Get(ctx, id)
	if err != nil {
		return nil, taskError("tasks/get", err)
	}
	t := newTask("complete", id, info)
	if a := h.asks.get(id); a != nil {
		if q := a.requests(); q != nil {
			t.Status, t.InputRequests = taskInputRequired, q
			t.StatusMessage = "the program waits for the host's answer; give it with tasks/update"
			return t, nil
		}
	}
	obs := newObserver(ctx, nil)
	defer obs.stop()
	peek, cancel := context.WithTimeoutCause(ctx, taskPeek, errWaitOver)
	defer cancel()
	res, err := h.engine.Attach(peek, id, from[0], from[1], obs)
	switch {
	case err != nil && errors.Is(context.Cause(peek), errWaitOver) && ctx.Err() == nil:
		obs.stop()
		stdout, _ := validText(obs.text(run.Stdout))
		stderr, _ := validText(obs.text(run.Stderr))
		next := [2]int64{from[0] + int64(len(obs.text(run.Stdout))), from[1] + int64(len(obs.text(run.Stderr)))}
		t.StatusMessage = fmt.Sprintf("running; %d bytes of stdout and %d of stderr so far", next[0], next[1])
		t.Meta = map[string]any{outputMeta: map[string]any{"stdout": stdout, "stderr": stderr, "stdout_bytes": next[0], "stderr_bytes": next[1]}}
		return t, nil
	case err != nil && (ctx.Err() != nil || errdefs.IsNotFound(err) || errdefs.IsPermissionDenied(err)):
		return nil, taskError("tasks/get", err)
	case err == nil && res.Status == run.StatusCancelled:
		t.Status, t.StatusMessage = taskCancelled, res.Message
		t.LastUpdatedAt = stamp(ended(info, res))
		return t, nil
	}
	var result *mcpsdk.CallToolResult
	if err != nil {
		if now, gerr := h.engine.Get(ctx, id); gerr != nil || now.Error == "" {
			// The run is fine; its result cannot be read now.
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "tasks/get: " + err.Error()}
		}
		// As the tools/call gives a run sandboxd failed: a tool error.
		result = &mcpsdk.CallToolResult{}
		result.SetError(toolError(err))
	} else {
		if from != [2]int64{} {
			// The result is the whole call's: its output from the start.
			obs = newObserver(ctx, nil)
			defer obs.stop()
			if res, err = h.engine.Attach(ctx, id, 0, 0, obs); err != nil {
				return nil, taskError("tasks/get", err)
			}
		}
		var out *RunOutput
		result, out, _ = h.ended(ctx, res, obs)
		result.StructuredContent = out
		t.LastUpdatedAt = stamp(ended(info, res))
	}
	t.StatusMessage = "the run ended: " + string(res.Status)
	if err != nil {
		t.StatusMessage = "sandboxd failed the run"
	}
	b, err := completeResult(result)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "tasks/get: the run's result: " + err.Error()}
	}
	t.Status, t.Result = taskCompleted, b
	return t, nil
}

// ended is when a finished run ended, as near as its record says.
func ended(info run.Info, res run.Result) time.Time {
	if info.Started == nil {
		return time.Now()
	}
	return info.Started.StartedAt.Add(res.Duration)
}

// completeResult is a tool call's result as a 2026-07-28 tools/call
// gives it, resultType and all (the SDK's own field for it is unexported).
func completeResult(res *mcpsdk.CallToolResult) (json.RawMessage, error) {
	b, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	var wire map[string]any
	if err := json.Unmarshal(b, &wire); err != nil {
		return nil, err
	}
	wire["resultType"] = "complete"
	return json.Marshal(wire)
}

// taskError is the JSON-RPC error of a task request the engine refused:
// an unknown task (or another caller's, which is not told apart) is an
// invalid parameter, as the extension has it.
func taskError(method string, err error) *jsonrpc.Error {
	if errdefs.IsNotFound(err) || errdefs.IsPermissionDenied(err) || errdefs.IsInvalidArgument(err) {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("%s: Failed to retrieve task: %v", method, err)}
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("%s: %v", method, err)}
}

// taskMethods answers the extension's methods on the stateless HTTP path
// and passes every other request on.
type taskMethods struct {
	h       *handlers
	next    http.Handler
	maxBody int64
}

func (t taskMethods) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// 2026-07-28 clients name the method in Mcp-Method, and the SDK
	// refuses a request whose header and body disagree: only a request
	// that says tasks/ is read here, every other body once, by the SDK.
	if r.Method != http.MethodPost || r.Body == nil || !strings.HasPrefix(r.Header.Get("Mcp-Method"), "tasks/") {
		t.next.ServeHTTP(w, r)
		return
	}
	limit := t.maxBody
	if limit <= 0 {
		limit = defaultMaxBody
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	// The rest, if any, is the SDK's to read and refuse.
	r.Body = readCloser{io.MultiReader(bytes.NewReader(b), r.Body), r.Body}
	if err != nil || int64(len(b)) > limit {
		t.next.ServeHTTP(w, r)
		return
	}
	msg, err := jsonrpc.DecodeMessage(b)
	req, ok := msg.(*jsonrpc.Request)
	if err != nil || !ok || !req.IsCall() || !strings.HasPrefix(req.Method, "tasks/") {
		t.next.ServeHTTP(w, r)
		return
	}
	var p struct {
		TaskID string `json:"taskId"`
	}
	_ = json.Unmarshal(req.Params, &p)
	w.Header().Set("Content-Type", "application/json")
	resp := &jsonrpc.Response{ID: req.ID}
	// The headers route a task's requests to the daemon that holds it
	// (the extension has clients send them): they must say the truth. A
	// method the extension lacks is not found whatever its headers say,
	// as the SDK answers one (with 404).
	if !slices.Contains(taskMethodNames, req.Method) {
		resp = t.h.taskResponse(r.Context(), req)
		w.WriteHeader(http.StatusNotFound)
	} else if m, n := r.Header.Get("Mcp-Method"), r.Header.Get("Mcp-Name"); m != req.Method || n != p.TaskID {
		resp.Error = &jsonrpc.Error{Code: mcpsdk.CodeHeaderMismatch,
			Message: fmt.Sprintf("header mismatch: %s wants Mcp-Method %q and Mcp-Name %q (the taskId); the request has %q and %q", req.Method, req.Method, p.TaskID, m, n)}
		w.WriteHeader(http.StatusBadRequest)
	} else {
		resp = t.h.taskResponse(r.Context(), req)
	}
	out, err := jsonrpc.EncodeMessage(resp)
	if err != nil {
		http.Error(w, "encode the answer: "+err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = w.Write(out)
}

// defaultMaxBody bounds what taskMethods reads of a request whose limit
// the options leave to the SDK: the SDK's own default.
const defaultMaxBody = 10 << 20

type readCloser struct {
	io.Reader
	io.Closer
}

// taskResponse is the response to one of the extension's requests.
func (h *handlers) taskResponse(ctx context.Context, req *jsonrpc.Request) *jsonrpc.Response {
	res, werr := h.taskRequest(ctx, req.Method, req.Params)
	if werr != nil {
		return &jsonrpc.Response{ID: req.ID, Error: werr}
	}
	b, err := json.Marshal(res)
	if err != nil {
		return &jsonrpc.Response{ID: req.ID, Error: &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}}
	}
	return &jsonrpc.Response{ID: req.ID, Result: b}
}

// taskTransport serves the extension's methods on a transport's
// connection (stdio) beside the SDK.
type taskTransport struct {
	mcpsdk.Transport
	h *handlers
}

func (t taskTransport) Connect(ctx context.Context) (mcpsdk.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &taskConn{Connection: c, h: t.h, ctx: ctx}, nil
}

// taskConn answers the extension's requests it reads, in the caller's
// context, and hands the SDK everything else.
type taskConn struct {
	mcpsdk.Connection
	h   *handlers
	ctx context.Context
}

// Read hides the SDK's own connection's news of the session's protocol
// version, which it uses only to refuse JSON-RPC batches from 2025-06-18
// clients on: over stdio such a batch is served instead.
func (c *taskConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := c.Connection.Read(ctx)
		req, ok := msg.(*jsonrpc.Request)
		if err != nil || !ok || !req.IsCall() || !strings.HasPrefix(req.Method, "tasks/") {
			return msg, err
		}
		// Answered beside the SDK's calls, as it answers its own: a
		// tasks/get waits a little.
		go func() {
			_ = c.Connection.Write(c.ctx, c.h.taskResponse(c.ctx, req))
		}()
	}
}
