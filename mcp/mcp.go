// Package mcp is sandboxd's face for MCP hosts: the tools run_code and
// run_command, sessions, each run's bundle and a session's files as
// resources, and long runs as tasks (the Tasks extension, which it serves
// beside the SDK), on the official MCP Go SDK, at revisions 2025-11-25 and
// 2026-07-28, over stdio or Streamable HTTP. It is a thin adapter: every tool call
// becomes the same engine call the gRPC API makes, and the engine does the
// validation, the limits and the running. It imports no container SDK, and
// only this package sees MCP types.
package mcp

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/containerd/errdefs"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
	sbtools "github.com/sandboxd/sandboxd/task/tools"
)

// Engine runs tasks: the task engine in this process (task.Service), or a
// running daemon reached over its socket (client.Client).
type Engine interface {
	Run(ctx context.Context, req run.Request, obs run.Observer) (run.Result, error)
	Inventory(ctx context.Context) (task.Inventory, error)
	OpenBundle(ctx context.Context, digest string) (io.ReadCloser, error)
	CreateSession(ctx context.Context, req session.Request) (session.Info, error)
	DeleteSession(ctx context.Context, id string) (session.Info, error)
	Get(ctx context.Context, id string) (run.Info, error)
	Attach(ctx context.Context, id string, stdoutOffset, stderrOffset int64, obs run.Observer) (run.Result, error)
	Cancel(ctx context.Context, id string) (run.State, error)
	ListFiles(ctx context.Context, sessionID, dir string) ([]artifacts.Output, error)
	ReadFile(ctx context.Context, sessionID, path string) (io.ReadCloser, error)
	StartProcess(ctx context.Context, req session.ProcessRequest) (session.ProcessInfo, error)
	ReadProcessOutput(ctx context.Context, sessionID, processID string, from session.Offsets, limit int, wait time.Duration) (session.Output, error)
	SignalProcess(ctx context.Context, sessionID, processID string, n int) (session.ProcessInfo, error)
	WaitProcess(ctx context.Context, sessionID, processID string) (session.ProcessInfo, error)
	OpenPort(ctx context.Context, sessionID string, port int) (session.Port, error)
}

// Options configure the MCP server.
type Options struct {
	// Version is sandboxd's version, reported to hosts.
	Version string
	// OutputBytes is how much of each stream a tool result carries, to
	// keep models' context small; the bundle keeps more.
	OutputBytes int64
	// Wait is how long a tool call waits for its run: past it, the call
	// answers RUNNING with the run's id and the output so far, and
	// wait_run waits again. 0 waits for the end.
	Wait time.Duration
	// Log receives the server's own log lines (stderr, never stdout).
	Log *slog.Logger
	// Metrics, when set, gets the counts of requests by method and tool.
	Metrics prometheus.Registerer
}

// DefaultOutputBytes is the default of Options.OutputBytes.
const DefaultOutputBytes = 64 << 10

// Server is an MCP server of sandboxd's tools.
type Server struct {
	*mcpsdk.Server
	h      *handlers
	checks argumentChecks
}

// NewServer returns an MCP server whose tools run on e. It asks e for its
// languages, images and limits, which the tool descriptions and schemas
// state.
func NewServer(ctx context.Context, e Engine, opts Options) (*Server, error) {
	if opts.OutputBytes <= 0 {
		opts.OutputBytes = DefaultOutputBytes
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	inv, err := e.Inventory(ctx)
	if err != nil {
		return nil, fmt.Errorf("ask the engine what it runs: %w", err)
	}
	// A tool result carries no more of a stream than the engine allows.
	opts.OutputBytes = max(min(opts.OutputBytes, inv.MaxLimits.StdoutBytes, inv.MaxLimits.StderrBytes), limits.Minimums().StdoutBytes)
	s := &Server{Server: mcpsdk.NewServer(&mcpsdk.Implementation{Name: "sandboxd", Title: "sandboxd", Version: opts.Version}, &mcpsdk.ServerOptions{
		Instructions: instructions,
		Logger:       sdkLogger(opts.Log),
	}), h: &handlers{engine: e, opts: opts}}
	if opts.Metrics != nil {
		if err := countRequests(s.Server, opts.Metrics); err != nil {
			return nil, err
		}
	}
	s.AddReceivingMiddleware(s.checks.middleware, declarePrompts, s.h.listSessionFiles, s.h.grantedTools, s.h.taskCalls)
	if err := s.addTools(inv); err != nil {
		return nil, err
	}
	wait, cancel, err := runTools()
	if err != nil {
		return nil, err
	}
	addTool(s, wait, s.h.waitRun)
	addTool(s, cancel, s.h.cancelRun)
	s.AddResourceTemplate(&mcpsdk.ResourceTemplate{
		Name:        "bundle",
		Title:       "A run's artifact bundle",
		Description: "What a run was and what it produced: manifest.json (the request, image digest, runtime, limits, environment, outcome and every file's SHA-256), stdout, stderr, and each output file at output/PATH.",
		URITemplate: bundleURIPrefix + "{digest}/{+entry}",
	}, s.h.readBundle)
	s.AddResourceTemplate(sessionTemplate, s.h.readSessionFile)
	return s, nil
}

// declarePrompts declares the prompts capability in initialize's and
// server/discover's answers: the SDK answers prompts/list (with none, and
// caching hints) whether or not prompts are declared, and 2026-07-28 has
// a server declare what it answers. (The SDK's option for it is
// deprecated, and its Capabilities would have this server restate the
// deprecated logging capability the SDK declares by default.)
func declarePrompts(next mcpsdk.MethodHandler) mcpsdk.MethodHandler {
	return func(ctx context.Context, method string, req mcpsdk.Request) (mcpsdk.Result, error) {
		res, err := next(ctx, method, req)
		var caps *mcpsdk.ServerCapabilities
		switch r := res.(type) {
		case *mcpsdk.InitializeResult:
			caps = r.Capabilities
		case *mcpsdk.DiscoverResult:
			caps = r.Capabilities
		}
		if caps != nil && caps.Prompts == nil {
			caps.Prompts = &mcpsdk.PromptCapabilities{}
		}
		return res, err
	}
}

// Refresh states the engine's languages and images again in the tools'
// schemas (the catalog changed); hosts are told the list changed.
func (s *Server) Refresh(ctx context.Context) error {
	inv, err := s.h.engine.Inventory(ctx)
	if err != nil {
		return fmt.Errorf("ask the engine what it runs: %w", err)
	}
	return s.addTools(inv)
}

// addTools adds (or replaces) the tools whose schemas name what inv runs.
func (s *Server) addTools(inv task.Inventory) error {
	code, command, err := tools(inv)
	if err != nil {
		return err
	}
	create, end, err := sessionTools(inv)
	if err != nil {
		return err
	}
	addTool(s, code, s.h.runCode)
	addTool(s, command, s.h.runCommand)
	addTool(s, create, s.h.createSession)
	addTool(s, end, s.h.endSession)
	start, read, open, err := processTools()
	if err != nil {
		return err
	}
	addTool(s, start, s.h.startProcess)
	addTool(s, read, s.h.readProcess)
	addTool(s, open, s.h.openPort)
	return nil
}

// addTool adds (or replaces) a tool, its schemas made portable and its
// arguments checked first (see argumentChecks).
func addTool[In, Out any](s *Server, t *mcpsdk.Tool, h mcpsdk.ToolHandlerFor[In, Out]) {
	s.checks.add(t)
	mcpsdk.AddTool(s.Server, t, h)
}

const instructions = `sandboxd runs code in fresh, isolated, network-less containers: use run_code for a program in a language, run_command for shell commands. Without a session nothing persists between calls: pass input files with "files" and read results from stdout or the output files listed in the result. For step-by-step work (load data, inspect, transform, plot), create_session once and pass its session_id to run_code and run_command: /workspace and Python or JavaScript variables persist, and charts come back as images; start_process runs a server or a watcher in its background (read_process reads and stops it, open_port gives a server a URL); end_session when done. Each run leaves a verifiable bundle, linked from the result.`

// handlers serve the tools and resources.
type handlers struct {
	engine Engine
	opts   Options
	made   madeSessions
	ran    recentRuns
	asks   askBoard
}

func (h *handlers) runCode(ctx context.Context, req *mcpsdk.CallToolRequest, in RunCodeInput) (*mcpsdk.CallToolResult, *RunOutput, error) {
	opts, err := h.options(in.Common)
	if err != nil {
		return nil, nil, err
	}
	return h.run(ctx, req, run.Request{Program: &run.Program{Language: in.Language, Code: in.Code}, Options: opts})
}

func (h *handlers) runCommand(ctx context.Context, req *mcpsdk.CallToolRequest, in RunCommandInput) (*mcpsdk.CallToolResult, *RunOutput, error) {
	if (in.Command == "") == (len(in.Argv) == 0) {
		return nil, nil, errors.New(`invalid argument: give exactly one of "command" (a shell line) and "argv" (a list)`)
	}
	opts, err := h.options(in.Common)
	if err != nil {
		return nil, nil, err
	}
	opts.Image = in.Image
	return h.run(ctx, req, run.Request{Command: &run.Command{Argv: in.Argv, Shell: in.Command}, Options: opts})
}

// options turns the tools' common arguments into engine options; the
// engine checks everything else.
func (h *handlers) options(in Common) (run.Options, error) {
	// Refused here, before a conversion could wrap them around.
	if !(in.TimeoutSeconds >= 0 && in.TimeoutSeconds <= maxTimeoutSeconds) {
		return run.Options{}, fmt.Errorf("invalid argument: timeout_seconds: %v is out of range", in.TimeoutSeconds)
	}
	if in.MemoryMB < 0 || in.MemoryMB > math.MaxInt64>>20 {
		return run.Options{}, fmt.Errorf("invalid argument: memory_mb: %d is out of range", in.MemoryMB)
	}
	o := run.Options{
		Env:            in.Env,
		Seed:           in.Seed,
		SessionID:      in.SessionID,
		IdempotencyKey: in.IdempotencyKey,
		Tools:          in.Tools,
		Limits: limits.Limits{
			StdoutBytes: h.opts.OutputBytes,
			StderrBytes: h.opts.OutputBytes,
			Timeout:     time.Duration(math.Round(in.TimeoutSeconds*1000)) * time.Millisecond,
			MemoryBytes: in.MemoryMB << 20,
		},
	}
	switch in.Network {
	case "", string(netpolicy.None):
		o.Network.Mode = netpolicy.Mode(in.Network)
	default:
		o.Network = netpolicy.Request{Mode: netpolicy.AllowList, Policy: in.Network}
	}
	if in.Stdin != "" {
		o.Stdin = []byte(in.Stdin)
	}
	for i, f := range in.Files {
		content := []byte(f.Content)
		switch f.Encoding {
		case "", "utf-8":
		case "base64":
			b, err := base64.StdEncoding.DecodeString(f.Content)
			if err != nil {
				return run.Options{}, fmt.Errorf("invalid argument: files[%d].content is not base64: %w", i, err)
			}
			content = b
		}
		o.Files = append(o.Files, run.File{Path: f.Path, Content: content})
	}
	return o, nil
}

// maxTimeoutSeconds is the longest timeout_seconds that converts to a
// time.Duration; the engine refuses anything above its maximum anyway.
const maxTimeoutSeconds = float64(math.MaxInt64 / int64(time.Second))

// toolCall names the tool called as the caller's method, for the audit log.
func toolCall(ctx context.Context, req *mcpsdk.CallToolRequest) context.Context {
	c := access.CallerFrom(ctx)
	c.Method = "mcp"
	if req != nil && req.Params != nil {
		c.Method = "mcp tools/call " + req.Params.Name
	}
	return access.WithCaller(ctx, c)
}

// run runs a request, streaming output as progress when the caller asked
// for progress, and shapes the result for a model (see follow). A call
// the host cancels cancels its run.
func (h *handlers) run(ctx context.Context, req *mcpsdk.CallToolRequest, treq run.Request) (*mcpsdk.CallToolResult, *RunOutput, error) {
	if req != nil && req.Params != nil && req.Params.RequestState != "" {
		return h.resume(ctx, req)
	}
	obs := newObserver(ctx, req)
	defer obs.stop()
	done := make(chan ran, 1)
	runCtx, cancel := context.WithCancelCause(context.WithoutCancel(toolCall(ctx, req)))
	var a *asks
	switch c := hostConfirmerOf(req); {
	case c != nil:
		treq.Caller = sbtools.CallerSide{Confirmer: c}
	case asksHost(req):
		a = newAsks()
		treq.Caller = sbtools.CallerSide{Confirmer: boardConfirmer{asks: a, board: &h.asks, obs: obs}}
	}
	go func() {
		defer cancel(nil)
		res, err := h.engine.Run(runCtx, treq, obs)
		h.asks.forget(obs.runID())
		done <- ran{res, err}
	}()
	return h.follow(ctx, obs, following{done: done, stop: cancel, asks: a})
}

// ran is how a run a call follows ended.
type ran struct {
	res run.Result
	err error
}

// following is what a call follows: the run's end on done, from output
// offsets from; stop cancels the run when the host cancels the call (nil:
// the call only stops waiting); asks are the run's questions for the
// host, if it is asked through answers.
type following struct {
	done <-chan ran
	from [2]int64
	stop context.CancelCauseFunc
	asks *asks
}

// follow waits for a run as a tool call does: its result at the end; past
// Options.Wait, RUNNING with the run's id and the output so far, and the
// run goes on (see waitRun), or a task for a caller with the Tasks
// extension (see taskCalls); and, when the run asks a question of a host
// asked through answers, an input-required result whose retry answers it
// (see resume).
func (h *handlers) follow(ctx context.Context, obs *observer, f following) (*mcpsdk.CallToolResult, *RunOutput, error) {
	wait := h.waitTimer()
	// Once the wait has passed, the answer waits for the run's start: a
	// queued run has no id to poll by yet.
	var started <-chan struct{}
	for {
		var asked <-chan struct{}
		if f.asks != nil {
			asked = f.asks.asked()
		}
		select {
		case r := <-f.done:
			if r.err != nil {
				return nil, nil, toolError(r.err)
			}
			return h.ended(ctx, r.res, obs)
		case <-ctx.Done():
			if f.stop != nil {
				f.stop(context.Cause(ctx))
				<-f.done
			}
			return nil, nil, toolError(context.Canceled)
		case <-wait:
			wait, started = nil, obs.started
		case <-started:
			// A caller that declared the Tasks extension gets a task
			// instead (taskCalls).
			becameTask(ctx, obs.runID())
			return stillRunning(obs.runID(), f.from[0], f.from[1], obs)
		case <-asked:
			if q := f.asks.requests(); q != nil {
				obs.stop()
				return &mcpsdk.CallToolResult{InputRequests: q, RequestState: resumePrefix + obs.runID()}, nil, nil
			}
		}
	}
}

// resumePrefix starts the requestState of an input-required result: the
// run's id follows.
const resumePrefix = "run:"

// resume serves the retry of a call answered input-required: it gives the
// run the host's answers and follows the run again, from the start of its
// output. The state names a run the caller must be able to see, as for
// wait_run.
func (h *handlers) resume(ctx context.Context, req *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, *RunOutput, error) {
	id, ok := strings.CutPrefix(req.Params.RequestState, resumePrefix)
	if !ok || id == "" {
		return nil, nil, fmt.Errorf("invalid argument: requestState %q is not one sandboxd gave", req.Params.RequestState)
	}
	if _, err := h.engine.Get(toolCall(ctx, req), id); err != nil {
		return nil, nil, toolError(err)
	}
	a := h.asks.get(id)
	if a != nil {
		a.answer(req.Params.InputResponses)
	}
	return h.attach(ctx, req, id, [2]int64{}, a)
}

// attach follows run id from output offsets from, as wait_run does.
func (h *handlers) attach(ctx context.Context, req *mcpsdk.CallToolRequest, id string, from [2]int64, a *asks) (*mcpsdk.CallToolResult, *RunOutput, error) {
	obs := newObserver(ctx, req)
	defer obs.stop()
	actx, cancel := context.WithCancel(toolCall(ctx, req))
	defer cancel()
	done := make(chan ran, 1)
	go func() {
		res, err := h.engine.Attach(actx, id, from[0], from[1], obs)
		done <- ran{res, err}
	}()
	return h.follow(ctx, obs, following{done: done, from: from, asks: a})
}

// waitTimer fires once Options.Wait has passed; never without one.
func (h *handlers) waitTimer() <-chan time.Time {
	if h.opts.Wait <= 0 {
		return nil
	}
	return time.After(h.opts.Wait)
}

// ended shapes a run's result for a model.
func (h *handlers) ended(ctx context.Context, res run.Result, obs *observer) (*mcpsdk.CallToolResult, *RunOutput, error) {
	obs.stop()
	out := resultOutput(res, obs)
	result := &mcpsdk.CallToolResult{
		IsError: res.Status != run.StatusOK,
		Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: resultText(out, res)}},
	}
	result.Content = append(result.Content, h.images(ctx, res)...)
	if res.BundleDigest != "" {
		hex := strings.TrimPrefix(res.BundleDigest, "sha256:")
		result.Content = append(result.Content, &mcpsdk.ResourceLink{
			URI:         bundleURIPrefix + hex + "/manifest.json",
			Name:        "bundle " + res.BundleDigest,
			Title:       "Artifact bundle of run " + res.RunID,
			Description: "manifest of the run's bundle: request, image digest, limits, environment, outcome, files; stdout and stderr are at .../stdout and .../stderr",
			MIMEType:    "application/json",
		})
		result.Content = append(result.Content, outputLinks(res)...)
		h.ran.add(res)
	}
	return result, out, nil
}

// toolError turns an engine refusal into a tool error that says what to
// change; the SDK returns it with isError set.
func toolError(err error) error {
	switch {
	case errdefs.IsInvalidArgument(err):
		return fmt.Errorf("invalid argument: %w", err)
	case errdefs.IsResourceExhausted(err):
		return fmt.Errorf("sandboxd is busy, try again shortly: %w", err)
	case errdefs.IsFailedPrecondition(err), errdefs.IsPermissionDenied(err):
		return fmt.Errorf("cannot run this here: %w", err)
	case errdefs.IsAlreadyExists(err):
		return fmt.Errorf("refused: %w; use a new key for a new request", err)
	case errors.Is(err, context.Canceled):
		return errors.New("the call was cancelled")
	}
	return fmt.Errorf("sandboxd failed to run the task: %w", err)
}

// observer keeps a run's output for the result and, when the caller gave a
// progress token, sends it on as progress notifications: batched, and
// flushed at least every progressEvery.
type observer struct {
	ctx     context.Context
	session *mcpsdk.ServerSession
	token   any

	mu       sync.Mutex
	id       string
	started  chan struct{} // closed at the run's start
	out      map[run.Stream]*strings.Builder
	pending  strings.Builder
	sent     float64
	done     chan struct{}
	stopOnce sync.Once
	flushed  chan struct{}
}

const progressEvery = 200 * time.Millisecond

func newObserver(ctx context.Context, req *mcpsdk.CallToolRequest) *observer {
	o := &observer{ctx: ctx, out: map[run.Stream]*strings.Builder{run.Stdout: {}, run.Stderr: {}}, started: make(chan struct{}),
		done: make(chan struct{}), flushed: make(chan struct{})}
	if req != nil && req.Params != nil && req.Session != nil {
		o.session, o.token = req.Session, req.Params.GetProgressToken()
	}
	if o.token == nil {
		close(o.flushed)
		return o
	}
	go func() {
		defer close(o.flushed)
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				o.flush()
			case <-o.done:
				o.flush()
				return
			}
		}
	}()
	return o
}

func (o *observer) Started(st run.Started) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.id == "" {
		o.id = st.RunID
		close(o.started)
	}
	return nil
}

// runID is the run's id, once it started.
func (o *observer) runID() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.id
}

func (o *observer) Output(s run.Stream, p []byte) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.out[s].Write(p)
	if o.token != nil {
		o.pending.Write(p)
	}
	return nil
}

// flush sends the pending output as one progress notification.
func (o *observer) flush() {
	o.mu.Lock()
	msg := o.pending.String()
	o.pending.Reset()
	o.sent += float64(len(msg))
	progress := o.sent
	o.mu.Unlock()
	if msg == "" {
		return
	}
	err := o.session.NotifyProgress(o.ctx, &mcpsdk.ProgressNotificationParams{
		ProgressToken: o.token, Progress: progress, Message: strings.ToValidUTF8(msg, "\uFFFD"),
	})
	if err != nil && o.ctx.Err() == nil {
		slog.Debug("progress notification", "err", err)
	}
}

// stop ends the progress stream, after a last flush.
func (o *observer) stop() {
	o.stopOnce.Do(func() { close(o.done) })
	<-o.flushed
}

func (o *observer) text(s run.Stream) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.out[s].String()
}

// validText makes output safe for JSON text: invalid UTF-8 becomes U+FFFD.
func validText(s string) (string, bool) {
	if utf8.ValidString(s) {
		return s, true
	}
	return strings.ToValidUTF8(s, "\uFFFD"), false
}

// ServeStdio serves s on this process's stdin and stdout until the host
// closes them or ctx is done.
func ServeStdio(ctx context.Context, s *Server) error {
	return s.Run(ctx, taskTransport{Transport: &mcpsdk.StdioTransport{}, h: s.h})
}
