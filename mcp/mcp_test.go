package mcp

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/audit"
	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/internal/edge/budget"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/taskdir"
)

// program is what the fake sandbox does, chosen by the code it runs.
func program(ctx context.Context, spec runtime.Spec) runtime.Exit {
	code := ""
	for _, m := range spec.Mounts {
		if m.Target == "/code" {
			b, _ := os.ReadFile(filepath.Join(m.Source, "main.py"))
			code = string(b)
		}
	}
	// A command "serve" says it is ready and runs until stopped.
	if n := len(spec.Argv); n > 0 && spec.Argv[n-1] == "serve" {
		io.WriteString(spec.Stdout, "ready\n")
		<-ctx.Done()
		return runtime.Exit{Code: 137}
	}
	// A command "write NAME TEXT" leaves a file in /workspace.
	if n := len(spec.Argv); n > 0 && strings.HasPrefix(spec.Argv[n-1], "write ") {
		f := strings.SplitN(spec.Argv[n-1], " ", 3)
		for _, m := range spec.Mounts {
			if m.Target == "/workspace" {
				os.WriteFile(filepath.Join(m.Source, f[1]), []byte(f[2]), 0o644)
			}
		}
		return runtime.Exit{}
	}
	switch {
	case strings.HasPrefix(code, "print("):
		io.WriteString(spec.Stdout, strings.TrimSuffix(strings.TrimPrefix(code, "print("), ")")+"\n")
	case code == "fail":
		io.WriteString(spec.Stderr, "Traceback: boom\n")
		return runtime.Exit{Code: 1}
	case code == "flood":
		io.WriteString(spec.Stdout, strings.Repeat("x", 100000))
	case code == "forge":
		io.WriteString(spec.Stdout, `{"jsonrpc":"2.0","id":1,"result":{}}`+"\n")
	case code == "ticks":
		for i := 0; ctx.Err() == nil && i < 3; i++ {
			io.WriteString(spec.Stdout, "tick\n")
			time.Sleep(300 * time.Millisecond)
		}
	case code == "sleep":
		<-ctx.Done()
		return runtime.Exit{Code: 137}
	case code == "slow":
		select {
		case <-time.After(time.Second):
			slowFinished <- true
		case <-ctx.Done():
			slowFinished <- false
			return runtime.Exit{Code: 137}
		}
	}
	return runtime.Exit{}
}

// slowFinished reports whether the "slow" program ran to its end (true) or
// was killed (false).
var slowFinished = make(chan bool, 1)

// connect starts an engine on the fake runtime, an MCP server on it, and a
// client over in-memory transports.
func connect(t *testing.T, progress func(*mcpsdk.ProgressNotificationParams)) (*mcpsdk.ClientSession, *fake.Runtime) {
	t.Helper()
	return connectWaiting(t, progress, 0)
}

// connectWaiting is connect with a server whose tool calls wait at most
// wait for their runs, and whose options set changes.
func connectWaiting(t *testing.T, progress func(*mcpsdk.ProgressNotificationParams), wait time.Duration, set ...func(*Options)) (*mcpsdk.ClientSession, *fake.Runtime) {
	t.Helper()
	s, rt := newServer(t, wait, set...)
	st, ct := mcpsdk.NewInMemoryTransports()
	ss, err := s.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := &mcpsdk.ClientOptions{}
	if progress != nil {
		opts.ProgressNotificationHandler = func(_ context.Context, r *mcpsdk.ProgressNotificationClientRequest) { progress(r.Params) }
	}
	cs, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "test", Version: "1"}, opts).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
	})
	return cs, rt
}

// newServer starts an engine on the fake runtime and an MCP server on it,
// whose tool calls wait at most wait for their runs (0: to the end), and
// whose options set changes.
func newServer(t *testing.T, wait time.Duration, set ...func(*Options)) (*Server, *fake.Runtime) {
	t.Helper()
	rt := fake.New(program)
	store, err := artifacts.OpenStore(t.TempDir(), artifacts.DefaultStoreOptions())
	if err != nil {
		t.Fatal(err)
	}
	cfg := task.DefaultConfig()
	cfg.StateDir = t.TempDir()
	cfg.AllowedImages = []string{"sha256:python", "sha256:shell"}
	cfg.PoolSize = 0 // the pool is the engine's business, tested there
	log := slog.New(slog.DiscardHandler)
	svc, err := task.New(context.Background(), rt, cfg, task.WithDisk(taskdir.FolderDisk{}), task.WithLogger(log), task.WithArtifacts(store))
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Version: "test", OutputBytes: 4096, Wait: wait, Log: log}
	for _, f := range set {
		f(&opts)
	}
	s, err := NewServer(context.Background(), svc, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Shutdown(context.Background()) })
	return s, rt
}

func call(t *testing.T, cs *mcpsdk.ClientSession, tool string, args any) (*mcpsdk.CallToolResult, map[string]any) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcpsdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("CallTool(%s) = %v", tool, err)
	}
	var out map[string]any
	if res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(b, &out)
	}
	return res, out
}

func text(res *mcpsdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcpsdk.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

func TestToolsAreDescribed(t *testing.T) {
	cs, _ := connect(t, nil)
	list, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*mcpsdk.Tool{}
	var names []string
	for _, tool := range list.Tools {
		byName[tool.Name] = tool
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"cancel_run", "create_session", "end_session", "open_port", "read_process", "run_code", "run_command", "start_process", "wait_run"}) {
		t.Fatalf("tools = %v", names)
	}
	for _, name := range []string{"create_session", "end_session", "wait_run", "cancel_run", "start_process", "read_process", "open_port"} {
		tool := byName[name]
		if tool.OutputSchema == nil || tool.Annotations == nil || tool.Annotations.OpenWorldHint == nil || *tool.Annotations.OpenWorldHint {
			t.Errorf("%s: output schema %v, annotations %+v", name, tool.OutputSchema, tool.Annotations)
		}
	}
	for _, tool := range []*mcpsdk.Tool{byName["run_code"], byName["run_command"]} {
		in, _ := json.Marshal(tool.InputSchema)
		var schema struct {
			AdditionalProperties any `json:"additionalProperties"`
			Properties           map[string]struct {
				Enum    []any    `json:"enum"`
				Minimum *float64 `json:"minimum"`
				Maximum *float64 `json:"maximum"`
			} `json:"properties"`
		}
		json.Unmarshal(in, &schema)
		if schema.AdditionalProperties != false {
			t.Errorf("%s accepts unknown arguments: %s", tool.Name, in)
		}
		if ts := schema.Properties["timeout_seconds"]; ts.Minimum == nil || *ts.Maximum != 600 {
			t.Errorf("%s: timeout_seconds has no range from the engine's limits: %s", tool.Name, in)
		}
		if mb := schema.Properties["memory_mb"]; *mb.Minimum != 16 || *mb.Maximum != 4096 {
			t.Errorf("%s: memory_mb range = %v..%v", tool.Name, *mb.Minimum, *mb.Maximum)
		}
		if tool.OutputSchema == nil {
			t.Errorf("%s has no output schema", tool.Name)
		}
		a := tool.Annotations
		if a == nil || a.ReadOnlyHint || a.OpenWorldHint == nil || *a.OpenWorldHint || a.DestructiveHint == nil || *a.DestructiveHint {
			t.Errorf("%s annotations = %+v; want not read-only, closed world, not destructive", tool.Name, a)
		}
		for _, want := range []string{"512MiB", "no network", "/workspace", "Nothing persists"} {
			if !strings.Contains(tool.Description, want) {
				t.Errorf("%s description lacks %q: %s", tool.Name, want, tool.Description)
			}
		}
	}
	in, _ := json.Marshal(byName["run_code"].InputSchema)
	if !strings.Contains(string(in), `"enum":["python","bash","sh","c","cpp","javascript","typescript"]`) {
		t.Errorf("run_code's languages do not come from the engine: %s", in)
	}
	if !strings.Contains(byName["run_code"].Description, "python (sandboxd/python)") {
		t.Errorf("run_code description = %s", byName["run_code"].Description)
	}
}

func TestRunCodeResult(t *testing.T) {
	cs, _ := connect(t, nil)
	res, out := call(t, cs, "run_code", map[string]any{"language": "python", "code": "print(42)"})
	if res.IsError {
		t.Fatalf("isError on success: %s", text(res))
	}
	if out["status"] != "OK" || out["stdout"] != "42\n" || out["exit_code"] != 0.0 || out["bundle_digest"] == "" {
		t.Fatalf("structured = %v", out)
	}
	if got := text(res); !strings.HasPrefix(got, "status: OK (exited with code 0)") || !strings.Contains(got, "--- stdout ---\n42\n") {
		t.Fatalf("text = %q", got)
	}
	var link *mcpsdk.ResourceLink
	for _, c := range res.Content {
		if l, ok := c.(*mcpsdk.ResourceLink); ok {
			link = l
		}
	}
	if link == nil || !strings.HasSuffix(link.URI, "/manifest.json") {
		t.Fatalf("no resource_link to the bundle: %v", res.Content)
	}
	read, err := cs.ReadResource(context.Background(), &mcpsdk.ReadResourceParams{URI: link.URI})
	if err != nil {
		t.Fatal(err)
	}
	var m artifacts.Manifest
	if err := json.Unmarshal([]byte(read.Contents[0].Text), &m); err != nil || m.Reproducible.Request.Language != "python" {
		t.Fatalf("manifest resource = %q, %v", read.Contents[0].Text, err)
	}
	stdout, err := cs.ReadResource(context.Background(), &mcpsdk.ReadResourceParams{URI: strings.Replace(link.URI, "manifest.json", "stdout", 1)})
	if err != nil || stdout.Contents[0].Text != "42\n" {
		t.Fatalf("stdout resource = %v, %v", stdout, err)
	}
	if _, err := cs.ReadResource(context.Background(), &mcpsdk.ReadResourceParams{URI: "sandboxd://bundle/" + strings.Repeat("0", 64) + "/manifest.json"}); err == nil {
		t.Fatal("reading a missing bundle succeeded")
	}
}

func TestUserCodeFailureIsAResult(t *testing.T) {
	cs, _ := connect(t, nil)
	res, out := call(t, cs, "run_code", map[string]any{"language": "python", "code": "fail"})
	if !res.IsError || out["status"] != "NONZERO_EXIT" || out["exit_code"] != 1.0 {
		t.Fatalf("isError %v structured %v", res.IsError, out)
	}
	if !strings.Contains(text(res), "--- stderr ---\nTraceback: boom") {
		t.Fatalf("text = %q", text(res))
	}
}

// TestRequestsAreCountedByMethodAndTool: requests are counted by JSON-RPC
// method, tool and outcome.
func TestRequestsAreCountedByMethodAndTool(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	cs, _ := connectWaiting(t, nil, 0, func(o *Options) { o.Metrics = reg })
	call(t, cs, "run_code", map[string]any{"language": "python", "code": "print(1)"})
	call(t, cs, "run_code", map[string]any{"language": "python", "code": "fail"})
	if _, err := cs.ListTools(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.ReadResource(context.Background(), &mcpsdk.ReadResourceParams{URI: "sandboxd://nothing"}); err == nil {
		t.Fatal("reading a resource that is not there succeeded")
	}
	for labels, want := range map[[3]string]float64{
		{"tools/call", "run_code", "ok"}:         1,
		{"tools/call", "run_code", "tool_error"}: 1,
		{"tools/list", "", "ok"}:                 1,
		{"resources/read", "", "error"}:          1,
	} {
		c, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		if got := counterValue(c, "sandboxd_mcp_requests_total", map[string]string{"method": labels[0], "tool": labels[1], "outcome": labels[2]}); got != want {
			t.Errorf("sandboxd_mcp_requests_total%v = %v, want %v", labels, got, want)
		}
	}
	if problems, err := promtest.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %v", problems, err)
	}
}

// counterValue is the value of the counter called name with labels in mfs.
func counterValue(mfs []*dto.MetricFamily, name string, labels map[string]string) float64 {
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return -1
}

func TestTruncationIsExplained(t *testing.T) {
	cs, _ := connect(t, nil)
	res, out := call(t, cs, "run_code", map[string]any{"language": "python", "code": "flood"})
	if out["stdout_truncated"] != true || out["stdout_bytes"] != 100000.0 || len(out["stdout"].(string)) != 4096 {
		t.Fatalf("structured = truncated %v bytes %v shown %d", out["stdout_truncated"], out["stdout_bytes"], len(out["stdout"].(string)))
	}
	if !strings.Contains(text(res), "[stdout truncated: showing the first 4096 of 100000 bytes; 95904 bytes left out]") {
		t.Fatalf("text = %q", text(res))
	}
}

// TestOutputCannotForgeMessages: a program that prints JSON-RPC gets its
// line back as text inside the result.
func TestOutputCannotForgeMessages(t *testing.T) {
	cs, _ := connect(t, nil)
	res, out := call(t, cs, "run_code", map[string]any{"language": "python", "code": "forge"})
	forged := `{"jsonrpc":"2.0","id":1,"result":{}}`
	if !strings.Contains(text(res), forged) || out["stdout"] != forged+"\n" {
		t.Fatalf("the forged line is not plain text in the result: %q", text(res))
	}
}

func TestBadArgumentsAreToolErrors(t *testing.T) {
	cs, rt := connect(t, nil)
	tests := []struct {
		name string
		tool string
		args map[string]any
		want string
	}{
		{"unknown field", "run_code", map[string]any{"language": "python", "code": "x", "colour": "red"}, "colour: is not an argument of run_code (it takes code, env, "},
		{"wrong type", "run_code", map[string]any{"language": "python", "code": "x", "timeout_seconds": "soon"}, `timeout_seconds: "soon" is a string, want a number`},
		{"unknown language", "run_code", map[string]any{"language": "cobol", "code": "x"}, `language: "cobol" is not one of python, `},
		{"timeout out of range", "run_code", map[string]any{"language": "python", "code": "x", "timeout_seconds": 9999}, "timeout_seconds: 9999 is above the maximum "},
		{"memory above the maximum", "run_code", map[string]any{"language": "python", "code": "x", "memory_mb": 100000}, "memory_mb: 100000 is above the maximum "},
		{"a file's path of another type", "run_code", map[string]any{"language": "python", "code": "x", "files": []any{map[string]any{"path": 3, "content": ""}}}, "files[0].path: 3 is a whole number, want a string"},
		{"timeout that wraps", "run_code", map[string]any{"language": "python", "code": "x", "timeout_seconds": 1e300}, "timeout_seconds"},
		{"memory that wraps", "run_code", map[string]any{"language": "python", "code": "x", "memory_mb": int64(1) << 60}, "memory_mb"},
		{"missing code", "run_code", map[string]any{"language": "python"}, "code: is required"},
		{"bad base64", "run_code", map[string]any{"language": "python", "code": "x", "files": []any{map[string]any{"path": "a", "content": "!!", "encoding": "base64"}}}, "files[0].content is not base64"},
		{"path traversal", "run_code", map[string]any{"language": "python", "code": "x", "files": []any{map[string]any{"path": "../../etc/x", "content": "y"}}}, "files[0].path"},
		{"oversize code", "run_code", map[string]any{"language": "python", "code": strings.Repeat("#", 2<<20)}, "code: is 2097152 bytes"},
		{"command and argv", "run_command", map[string]any{"command": "ls", "argv": []any{"ls"}}, "exactly one"},
		{"neither", "run_command", map[string]any{}, "exactly one"},
		{"bad env name", "run_command", map[string]any{"command": "ls", "env": map[string]any{"A-B": "1"}}, "env"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, _ := call(t, cs, tt.tool, tt.args)
			if !res.IsError || !strings.Contains(text(res), tt.want) {
				t.Fatalf("isError %v text %q, want an error naming %q", res.IsError, text(res), tt.want)
			}
		})
	}
	if n := len(rt.Specs()); n != 0 {
		t.Fatalf("%d containers were started for bad arguments", n)
	}
	if _, err := cs.CallTool(context.Background(), &mcpsdk.CallToolParams{Name: "rm_rf"}); err == nil {
		t.Fatal("an unknown tool was called")
	}
	// The session still serves after all that; null is an argument left
	// out, as hosts write it.
	if res, out := call(t, cs, "run_command", map[string]any{"argv": []any{"true"}, "seed": nil, "files": nil}); res.IsError || out["status"] != "OK" {
		t.Fatalf("after bad calls: %v %q", out, text(res))
	}
}

func TestProgressCarriesOutput(t *testing.T) {
	var mu sync.Mutex
	var got []*mcpsdk.ProgressNotificationParams
	cs, _ := connect(t, func(p *mcpsdk.ProgressNotificationParams) {
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
	})
	params := &mcpsdk.CallToolParams{Name: "run_code", Arguments: map[string]any{"language": "python", "code": "ticks"}}
	params.SetProgressToken("tok-1")
	if _, err := cs.CallTool(context.Background(), params); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	var all strings.Builder
	for _, p := range got {
		if p.ProgressToken != "tok-1" {
			t.Fatalf("progress token %v", p.ProgressToken)
		}
		all.WriteString(p.Message)
	}
	if len(got) < 2 || all.String() != "tick\ntick\ntick\n" {
		t.Fatalf("%d notifications carrying %q; want the ticks as they came", len(got), all.String())
	}
}

func TestCancelledCallKillsTheRun(t *testing.T) {
	cs, rt := connect(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcpsdk.CallToolParams{Name: "run_code", Arguments: map[string]any{"language": "python", "code": "sleep"}})
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for len(rt.Running()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the run never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	for start := time.Now(); len(rt.Running()) > 0; time.Sleep(5 * time.Millisecond) {
		if time.Since(start) > time.Second {
			t.Fatal("the container outlived the cancelled call by more than a second")
		}
	}
}

func TestHTTPGuard(t *testing.T) {
	s := &Server{Server: mcpsdk.NewServer(&mcpsdk.Implementation{Name: "t", Version: "1"}, nil)}
	tests := []struct {
		name   string
		opts   HTTPOptions
		host   string
		origin string
		token  string
		want   int
	}{
		{name: "loopback host", host: "127.0.0.1:7000", want: http.StatusOK},
		{name: "localhost", host: "localhost:7000", want: http.StatusOK},
		{name: "rebinding host", host: "evil.example:7000", want: http.StatusForbidden},
		{name: "allowed host", opts: HTTPOptions{AllowedHosts: []string{"sandbox.internal"}}, host: "sandbox.internal", want: http.StatusOK},
		{name: "foreign origin", host: "127.0.0.1:7000", origin: "http://evil.example", want: http.StatusForbidden},
		{name: "own origin", host: "127.0.0.1:7000", origin: "http://127.0.0.1:7000", want: http.StatusOK},
		{name: "allowed origin", opts: HTTPOptions{AllowedOrigins: []string{"https://ide.example"}}, host: "127.0.0.1:7000", origin: "https://ide.example", want: http.StatusOK},
		{name: "no token", opts: HTTPOptions{Identities: access.NewIdentities("secret-token-123456", access.Caller{Name: "token"}, false)}, host: "127.0.0.1:7000", want: http.StatusUnauthorized},
		{name: "wrong token", opts: HTTPOptions{Identities: access.NewIdentities("secret-token-123456", access.Caller{Name: "token"}, false)}, host: "127.0.0.1:7000", token: "nope", want: http.StatusUnauthorized},
		{name: "right token", opts: HTTPOptions{Identities: access.NewIdentities("secret-token-123456", access.Caller{Name: "token"}, false)}, host: "127.0.0.1:7000", token: "secret-token-123456", want: http.StatusOK},
		{name: "over the request budget", opts: HTTPOptions{Budget: budget.New(64, 4), MaxBodyBytes: 1 << 20}, host: "127.0.0.1:7000", want: http.StatusServiceUnavailable},
		{name: "within the request budget", opts: HTTPOptions{Budget: budget.New(1<<20, 4), MaxBodyBytes: 1 << 20}, host: "127.0.0.1:7000", want: http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
			req := httptest.NewRequest(http.MethodPost, Path, strings.NewReader(body))
			req.Host = tt.host
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if tt.origin != "" {
				req.Header.Set("Origin", tt.origin)
			}
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			rec := httptest.NewRecorder()
			HTTPHandler(s, tt.opts).ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Fatalf("status %d (%s), want %d", rec.Code, rec.Body.String(), tt.want)
			}
			// A refused host is told what to send, lest it go looking for
			// OAuth.
			if tt.want == http.StatusUnauthorized && !strings.Contains(rec.Body.String(), "Authorization: Bearer TOKEN (sandboxd uses no OAuth)") {
				t.Errorf("a 401 says %q", rec.Body.String())
			}
		})
	}
}

// TestRefusedTokenIsAudited: a request refused for its token is a line of
// the audit log, naming the listener's caller and the client.
func TestRefusedTokenIsAudited(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	log, err := audit.Open(path, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	s := &Server{Server: mcpsdk.NewServer(&mcpsdk.Implementation{Name: "t", Version: "1"}, nil)}
	h := HTTPHandler(s, HTTPOptions{Identities: access.NewIdentities("secret-token-123456", access.Caller{Name: "token"}, false), Audit: log})
	req := httptest.NewRequest(http.MethodPost, Path, strings.NewReader("{}"))
	req.Host, req.RemoteAddr = "127.0.0.1:7000", "127.0.0.9:41000"
	req.Header.Set("Authorization", "Bearer wrong")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b, _ := os.ReadFile(path)
	var e audit.Event
	if err := json.Unmarshal(b, &e); err != nil || rec.Code != http.StatusUnauthorized || e.Decision != audit.Refused ||
		e.Code != "UNAUTHENTICATED" || e.Tenant != "" || e.Peer != "127.0.0.9:41000" || e.Method != "mcp" {
		t.Fatalf("status %d, audit line %s (%v)", rec.Code, b, err)
	}
}

// TestDroppedHTTPConnectionIsNotACancellation drops the connection of a
// tool call over Streamable HTTP: the run goes on to its end.
func TestDroppedHTTPConnectionIsNotACancellation(t *testing.T) {
	s, _ := newServer(t, 0)
	srv := httptest.NewServer(HTTPHandler(s, HTTPOptions{}))
	defer srv.Close()
	post := func(session, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+Path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2025-06-18")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	session := resp.Header.Get("Mcp-Session-Id")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	resp = post(session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	resp.Body.Close()
	if session == "" {
		t.Fatal("no session")
	}
	resp = post(session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_code","arguments":{"language":"python","code":"slow"}}}`)
	time.Sleep(200 * time.Millisecond)
	// Drop the connection in the middle of the call.
	resp.Body.Close()
	srv.CloseClientConnections()
	select {
	case finished := <-slowFinished:
		if !finished {
			t.Fatal("dropping the connection killed the run")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the run never ended")
	}
}

// TestLongRunAnswersRunning: a run that outlasts the call's wait answers
// RUNNING with its id and the output so far; wait_run from the offsets it
// names returns the rest, then the result; cancel_run stops a run.
func TestLongRunAnswersRunning(t *testing.T) {
	cs, _ := connectWaiting(t, nil, 200*time.Millisecond)
	res, out := call(t, cs, "run_code", map[string]any{"language": "python", "code": "ticks"})
	if out["status"] != "RUNNING" || res.IsError || out["run_id"] == "" {
		t.Fatalf("run_code of a long run: %v", out)
	}
	id, seen := out["run_id"].(string), out["stdout"].(string)
	for i := 0; out["status"] == "RUNNING"; i++ {
		if i == 20 {
			t.Fatalf("still running after %d waits: %v", i, out)
		}
		_, out = call(t, cs, "wait_run", map[string]any{"run_id": id, "stdout_offset": out["stdout_bytes"], "stderr_offset": out["stderr_bytes"]})
		seen += out["stdout"].(string)
	}
	if out["status"] != "OK" || out["run_id"] != id || seen != "tick\ntick\ntick\n" {
		t.Fatalf("the waits ended with %v; output %q", out, seen)
	}

	_, out = call(t, cs, "run_code", map[string]any{"language": "python", "code": "sleep"})
	if out["status"] != "RUNNING" {
		t.Fatalf("run_code of a sleeping run: %v", out)
	}
	id = out["run_id"].(string)
	if _, c := call(t, cs, "cancel_run", map[string]any{"run_id": id}); c["state"] != "RUNNING" {
		t.Fatalf("cancel_run: %v", c)
	}
	for out["status"] == "RUNNING" {
		_, out = call(t, cs, "wait_run", map[string]any{"run_id": id})
	}
	if out["status"] != "CANCELLED" {
		t.Fatalf("the cancelled run: %v", out)
	}
	if res, _ := call(t, cs, "wait_run", map[string]any{"run_id": "no-such-run"}); !res.IsError {
		t.Fatal("wait_run of no run is not an error")
	}
}

// TestRefreshNamesTheNewCatalog: an operator's recipe loaded while the
// server runs (SIGHUP) appears in the tools' enums after Refresh, and hosts
// are told the list changed.
func TestRefreshNamesTheNewCatalog(t *testing.T) {
	s, _ := newServer(t, 0)
	svc := s.h.engine.(*task.Service)
	st, ct := mcpsdk.NewInMemoryTransports()
	ss, err := s.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	changed := make(chan struct{}, 8)
	cs, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "test", Version: "1"}, &mcpsdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcpsdk.ToolListChangedRequest) { changed <- struct{}{} },
	}).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
	})
	enums := func() (langs, imgs []any) {
		list, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tool := range list.Tools {
			var schema struct {
				Properties map[string]struct {
					Enum []any `json:"enum"`
				} `json:"properties"`
			}
			b, _ := json.Marshal(tool.InputSchema)
			json.Unmarshal(b, &schema)
			switch tool.Name {
			case "run_code":
				langs = schema.Properties["language"].Enum
			case "run_command":
				imgs = schema.Properties["image"].Enum
			}
		}
		return langs, imgs
	}
	if langs, _ := enums(); slices.Contains(langs, any("greet")) {
		t.Fatalf("greet is listed before its recipe: %v", langs)
	}
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "tools"), 0o755)
	os.WriteFile(filepath.Join(dir, "tools", images.RecipeFile), []byte("from shell\nlanguage greet main.sh sh\n"), 0o644)
	catalog, err := images.WithDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.SetCatalog(catalog); err != nil {
		t.Fatal(err)
	}
	if err := s.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("no tools/list_changed notification")
	}
	langs, imgs := enums()
	if !slices.Contains(langs, any("greet")) || !slices.Contains(imgs, any("sandboxd/tools")) {
		t.Fatalf("after Refresh: languages %v, images %v", langs, imgs)
	}
}

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/tools.golden.json")

// TestToolListIsPortableAndGolden keeps tools/list to what every host's
// validator takes (one type name per schema, never a list with "null")
// and to its golden copy, so that a change to what hosts see is a change
// to testdata/tools.golden.json in review. It logs the list's size, what
// a host puts in its model's context.
func TestToolListIsPortableAndGolden(t *testing.T) {
	cs, _ := connect(t, nil)
	list, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.MarshalIndent(list.Tools, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if types, ok := v["type"].([]any); ok {
				t.Errorf("%s: type %v is a list", path, types)
			}
			for k, sub := range v {
				walk(path+"/"+k, sub)
			}
		case []any:
			for i, sub := range v {
				walk(fmt.Sprintf("%s/%d", path, i), sub)
			}
		}
	}
	var tree any
	json.Unmarshal(got, &tree)
	walk("tools", tree)
	compact, _ := json.Marshal(list.Tools)
	t.Logf("tools/list: %d tools, %d bytes of JSON (about %d tokens at 4 bytes a token)", len(list.Tools), len(compact), len(compact)/4)

	golden := filepath.Join("testdata", "tools.golden.json")
	if *updateGolden {
		if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test ./mcp -run %s -update-golden writes it)", err, t.Name())
	}
	if string(want) != string(got)+"\n" {
		t.Errorf("tools/list differs from %s; if the change is meant, rerun with -update-golden and review the diff", golden)
	}
}

// TestCreateSessionShellAndImage: create_session's language "shell", or
// none, makes a session of commands in the shell image, and image picks
// the image.
func TestCreateSessionShellAndImage(t *testing.T) {
	cs, _ := connect(t, nil)
	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"language": "shell"}, "sandboxd/shell"},
		{map[string]any{}, "sandboxd/shell"},
		{map[string]any{"language": "shell", "image": "sandboxd/python"}, "sandboxd/python"},
		{map[string]any{"language": "python"}, "sandboxd/python"},
	} {
		res, out := call(t, cs, "create_session", tc.args)
		if res.IsError || out["image"] != tc.want {
			t.Errorf("create_session %v: %v %s, want image %s", tc.args, out, text(res), tc.want)
			continue
		}
		call(t, cs, "end_session", map[string]any{"session_id": out["session_id"]})
	}
	if res, _ := call(t, cs, "create_session", map[string]any{"image": "sandboxd/nonesuch"}); !res.IsError || !strings.Contains(text(res), "image") {
		t.Errorf("an image the daemon lacks: %s", text(res))
	}
}

// TestSessionFilesAreResources lists and reads a session's files as
// resources, text and binary, and refuses them to another tenant and
// after the session ended.
func TestSessionFilesAreResources(t *testing.T) {
	s, _ := newServer(t, 0)
	st, ct := mcpsdk.NewInMemoryTransports()
	ss, err := s.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx := context.Background()
	_, created := call(t, cs, "create_session", map[string]any{})
	id, _ := created["session_id"].(string)
	for _, cmd := range []string{"write notes.txt hello", "write chart.png PNG"} {
		if res, out := call(t, cs, "run_command", map[string]any{"command": cmd, "session_id": id}); res.IsError {
			t.Fatalf("%s: %v %s", cmd, out, text(res))
		}
	}
	list, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range list.Resources {
		got[r.URI] = r.MIMEType
	}
	notes, chart := sessionURIPrefix+id+"/notes.txt", sessionURIPrefix+id+"/chart.png"
	if got[notes] != "text/plain; charset=utf-8" || got[chart] != "image/png" {
		t.Fatalf("resources/list = %v, want the session's two files", got)
	}
	read, err := cs.ReadResource(ctx, &mcpsdk.ReadResourceParams{URI: notes})
	if err != nil || read.Contents[0].Text != "hello" {
		t.Fatalf("read %s = %+v, %v", notes, read, err)
	}
	read, err = cs.ReadResource(ctx, &mcpsdk.ReadResourceParams{URI: chart})
	if err != nil || string(read.Contents[0].Blob) != "PNG" {
		t.Fatalf("read %s = %+v, %v", chart, read, err)
	}

	// Another tenant neither reads nor sees them.
	other := access.WithCaller(ctx, access.Caller{Name: "other"})
	if _, err := s.h.readSessionFile(other, &mcpsdk.ReadResourceRequest{Params: &mcpsdk.ReadResourceParams{URI: notes}}); err == nil {
		t.Error("another tenant read the session's file")
	}
	empty := func(context.Context, string, mcpsdk.Request) (mcpsdk.Result, error) {
		return &mcpsdk.ListResourcesResult{}, nil
	}
	res, err := s.h.listSessionFiles(empty)(other, "resources/list", &mcpsdk.ListResourcesRequest{Params: &mcpsdk.ListResourcesParams{}})
	if err != nil || len(res.(*mcpsdk.ListResourcesResult).Resources) != 0 {
		t.Errorf("another tenant's resources/list = %v, %v; want none of the session's", res, err)
	}

	call(t, cs, "end_session", map[string]any{"session_id": id})
	if _, err := cs.ReadResource(ctx, &mcpsdk.ReadResourceParams{URI: notes}); err == nil {
		t.Error("a file of an ended session was read")
	}
	// What stays is what the calls' bundles keep, not the session's.
	list, err = cs.ListResources(ctx, nil)
	if err != nil || slices.ContainsFunc(list.Resources, func(r *mcpsdk.Resource) bool { return strings.HasPrefix(r.URI, sessionURIPrefix) }) {
		t.Errorf("after the session ended: %v, %v", list, err)
	}
}

// headerRecorder keeps the Mcp-Session-Id headers a server answers with,
// and sends a bearer token.
type headerRecorder struct {
	token    string
	mu       sync.Mutex
	sessions []string
}

func (h *headerRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+h.token)
	res, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		if id := res.Header.Get("Mcp-Session-Id"); id != "" {
			h.mu.Lock()
			h.sessions = append(h.sessions, id)
			h.mu.Unlock()
		}
	}
	return res, err
}

// TestBothRevisionsOnOneEndpoint connects a 2026-07-28 client and a
// 2025-11-25 one to one HTTP endpoint: the first is served with no
// transport session and uses a sandbox session across its requests by
// id; the second initializes and keeps a transport session, as before.
// On both, another tenant's client is refused the session's handle.
func TestBothRevisionsOnOneEndpoint(t *testing.T) {
	s, _ := newServer(t, 0)
	const token = "secret-token-123456"
	srv := httptest.NewServer(HTTPHandler(s, HTTPOptions{Identities: access.NewIdentities(token, access.Caller{Name: "token"}, false)}))
	defer srv.Close()
	const otherToken = "other-token-654321"
	otherSrv := httptest.NewServer(HTTPHandler(s, HTTPOptions{Identities: access.NewIdentities(otherToken, access.Caller{Name: "other"}, false)}))
	defer otherSrv.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		version      string
		transportful bool
	}{
		{"2026-07-28", false},
		{"2025-11-25", true},
	} {
		t.Run(tc.version, func(t *testing.T) {
			rec := &headerRecorder{token: token}
			transport := &mcpsdk.StreamableClientTransport{Endpoint: srv.URL + Path, HTTPClient: &http.Client{Transport: rec}}
			cs, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, transport, &mcpsdk.ClientSessionOptions{ProtocolVersion: tc.version})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if got := cs.InitializeResult().ProtocolVersion; got != tc.version {
				t.Fatalf("negotiated %s, want %s", got, tc.version)
			}
			_, created := call(t, cs, "create_session", map[string]any{})
			id, _ := created["session_id"].(string)
			for i := range 2 {
				if res, out := call(t, cs, "run_code", map[string]any{"language": "python", "code": "print(7)", "session_id": id}); res.IsError || out["session_seq"] != float64(i+1) {
					t.Fatalf("call %d in session %s: %v %s", i+1, id, out, text(res))
				}
			}
			// Another tenant, on the same server, gets nothing of it.
			other := &headerRecorder{token: otherToken}
			ot := &mcpsdk.StreamableClientTransport{Endpoint: otherSrv.URL + Path, HTTPClient: &http.Client{Transport: other}}
			ocs, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "other", Version: "1"}, nil).Connect(ctx, ot, &mcpsdk.ClientSessionOptions{ProtocolVersion: tc.version})
			if err != nil {
				t.Fatal(err)
			}
			defer ocs.Close()
			if res, _ := call(t, ocs, "run_code", map[string]any{"language": "python", "code": "print(7)", "session_id": id}); !res.IsError || !strings.Contains(text(res), id) {
				t.Errorf("another tenant's call in the session: %s", text(res))
			}
			if _, err := ocs.ReadResource(ctx, &mcpsdk.ReadResourceParams{URI: sessionURIPrefix + id + "/x"}); err == nil {
				t.Error("another tenant read a file of the session")
			}
			if res, _ := call(t, cs, "end_session", map[string]any{"session_id": id}); res.IsError {
				t.Fatal(text(res))
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if (len(rec.sessions) > 0) != tc.transportful {
				t.Errorf("transport session ids %q; want one only for %v", rec.sessions, tc.transportful)
			}
		})
	}
}

// TestRetryWithTheKeyFollowsTheRun: a run_code retried with its
// idempotency key follows the first call's run instead of starting one.
func TestRetryWithTheKeyFollowsTheRun(t *testing.T) {
	cs, _ := connectWaiting(t, nil, 200*time.Millisecond)
	args := map[string]any{"language": "python", "code": "ticks", "idempotency_key": "retry-1"}
	_, first := call(t, cs, "run_code", args)
	_, retry := call(t, cs, "run_code", args)
	if first["status"] != "RUNNING" || retry["run_id"] != first["run_id"] {
		t.Fatalf("the first call %v, the retry %v: want the same run", first, retry)
	}
	args["code"] = "print(1)"
	if res, _ := call(t, cs, "run_code", args); !res.IsError || !strings.Contains(text(res), "refused: options.idempotency_key") {
		t.Errorf("another request with the key: %s", text(res))
	}
}

// TestOutputFilesAreResources: a run's output files are linked from its
// result as bundle resources, a picture among them comes back as image
// content, resources/list names them for the caller and not for another
// tenant, and a link reads the file.
func TestOutputFilesAreResources(t *testing.T) {
	s, _ := newServer(t, 0)
	const token, otherToken = "secret-token-123456", "other-token-654321"
	srv := httptest.NewServer(HTTPHandler(s, HTTPOptions{Identities: access.NewIdentities(token, access.Caller{Name: "token"}, false)}))
	defer srv.Close()
	otherSrv := httptest.NewServer(HTTPHandler(s, HTTPOptions{Identities: access.NewIdentities(otherToken, access.Caller{Name: "other"}, false)}))
	defer otherSrv.Close()
	ctx := context.Background()
	connect := func(url, token string) *mcpsdk.ClientSession {
		transport := &mcpsdk.StreamableClientTransport{Endpoint: url + Path, HTTPClient: &http.Client{Transport: &headerRecorder{token: token}}}
		cs, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, transport, &mcpsdk.ClientSessionOptions{ProtocolVersion: statelessVersion})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	cs, other := connect(srv.URL, token), connect(otherSrv.URL, otherToken)

	res, out := call(t, cs, "run_command", map[string]any{"command": "write chart.png PNG"})
	if res.IsError || out["status"] != "OK" {
		t.Fatalf("the run: %s", text(res))
	}
	var link *mcpsdk.ResourceLink
	var image *mcpsdk.ImageContent
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcpsdk.ResourceLink:
			if strings.HasSuffix(c.URI, "/output/chart.png") {
				link = c
			}
		case *mcpsdk.ImageContent:
			image = c
		}
	}
	if link == nil || link.MIMEType != "image/png" || link.Size == nil || *link.Size != 3 {
		t.Fatalf("no link to the output file: %+v", res.Content)
	}
	if image == nil || string(image.Data) != "PNG" || image.MIMEType != "image/png" {
		t.Errorf("the picture as image content: %+v", image)
	}
	read, err := cs.ReadResource(ctx, &mcpsdk.ReadResourceParams{URI: link.URI})
	if err != nil || len(read.Contents) != 1 || string(read.Contents[0].Blob) != "PNG" {
		t.Fatalf("reading %s: %+v %v", link.URI, read, err)
	}
	list, err := cs.ListResources(ctx, nil)
	if err != nil || !slices.ContainsFunc(list.Resources, func(r *mcpsdk.Resource) bool { return r.URI == link.URI }) {
		t.Errorf("resources/list of the caller: %+v %v", list, err)
	}
	list, err = other.ListResources(ctx, nil)
	if err != nil || slices.ContainsFunc(list.Resources, func(r *mcpsdk.Resource) bool { return r.URI == link.URI }) {
		t.Errorf("resources/list of another tenant: %+v %v", list, err)
	}
	if _, err := other.ReadResource(ctx, &mcpsdk.ReadResourceParams{URI: link.URI}); err == nil {
		t.Error("another tenant read the output file")
	}
}

// TestBackgroundProcessTools: start_process answers with the first output
// and the offsets to read on from; read_process stops it with TERM and
// reports the end; open_port says when the daemon has no inbound proxy.
func TestBackgroundProcessTools(t *testing.T) {
	cs, _ := connect(t, nil)
	_, sess := call(t, cs, "create_session", map[string]any{})
	id := sess["session_id"].(string)
	res, out := call(t, cs, "start_process", map[string]any{"session_id": id, "command": "serve"})
	if res.IsError || out["state"] != "RUNNING" || out["stdout"] != "ready\n" || out["next_stdout_offset"] != 6.0 {
		t.Fatalf("start_process: %s %v", text(res), out)
	}
	res, out = call(t, cs, "read_process", map[string]any{"session_id": id, "process_id": out["process_id"], "stdout_offset": 6, "signal": "TERM"})
	if res.IsError || out["state"] != "EXITED" || out["exit_code"] != 143.0 || out["stdout"] != "" || !strings.Contains(text(res), "exit code 143") {
		t.Fatalf("read_process with TERM: %s %v", text(res), out)
	}
	res, _ = call(t, cs, "read_process", map[string]any{"session_id": id, "process_id": "p1", "signal": "STOP"})
	if !res.IsError || !strings.Contains(text(res), "signal") {
		t.Fatalf("an unknown signal: %s", text(res))
	}
	res, _ = call(t, cs, "open_port", map[string]any{"session_id": id, "port": 8000})
	if !res.IsError || !strings.Contains(text(res), "--inbound-listen") {
		t.Fatalf("open_port without the proxy: %s", text(res))
	}
}
