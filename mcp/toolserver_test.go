package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/internal/testutil/toolserver"
	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/taskdir"
	sbtools "github.com/sandboxd/sandboxd/task/tools"
)

// channel drives a run's tool channel as a program would: a request a
// line, then its answer.
type channel struct {
	t       *testing.T
	in      *io.PipeWriter
	answers *bufio.Reader
	done    chan struct{}
}

func openChannel(t *testing.T, run *sbtools.Channel) *channel {
	reqR, reqW := io.Pipe()
	ansR, ansW := io.Pipe()
	c := &channel{t: t, in: reqW, answers: bufio.NewReader(ansR), done: make(chan struct{})}
	go func() {
		run.Serve(reqR, ansW)
		ansW.Close()
		close(c.done)
	}()
	t.Cleanup(func() { c.close() })
	return c
}

func (c *channel) close() {
	c.in.Close()
	<-c.done
}

type answer struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Tools  []sbtools.Tool  `json:"tools"`
	Tool   *sbtools.Tool   `json:"tool"`
	Error  *struct {
		Kind, Message, Field string
	} `json:"error"`
}

func (c *channel) ask(line string) answer {
	c.t.Helper()
	if _, err := io.WriteString(c.in, line+"\n"); err != nil {
		c.t.Fatal(err)
	}
	got, err := c.answers.ReadString('\n')
	if err != nil {
		c.t.Fatalf("no answer to %s: %v", line, err)
	}
	var a answer
	if err := json.Unmarshal([]byte(got), &a); err != nil {
		c.t.Fatalf("answer %q: %v", got, err)
	}
	return a
}

func (c *channel) call(id int, tool, args string) answer {
	c.t.Helper()
	return c.ask(fmt.Sprintf(`{"id":%d,"op":"call","tool":%q,"arguments":%s}`, id, tool, args))
}

type confirmer struct {
	answer bool
	wait   bool
	asked  []string
	mu     sync.Mutex
}

func (f *confirmer) Confirm(ctx context.Context, c sbtools.Call) (bool, error) {
	f.mu.Lock()
	f.asked = append(f.asked, c.Tool+" "+string(c.Arguments))
	f.mu.Unlock()
	if f.wait {
		<-ctx.Done()
		return false, ctx.Err()
	}
	return f.answer, nil
}

func newOrders(t *testing.T) (*toolserver.Server, *sbtools.Registry) {
	srv := toolserver.Start(t)
	ts, err := NewToolServer("orders", srv.URL, http.Header{"Authorization": {"Bearer orders-secret"}}, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ts.Close() })
	reg := sbtools.NewRegistry(slog.New(slog.DiscardHandler))
	if err := reg.Add("orders", ts); err != nil {
		t.Fatal(err)
	}
	return srv, reg
}

// ordersServer is an MCP server on an engine of the fake runtime whose
// programs may call reg's tools; ctx is whose inventory its schemas state.
func ordersServer(t *testing.T, ctx context.Context, reg *sbtools.Registry, wait time.Duration) *Server {
	t.Helper()
	cfg := task.DefaultConfig()
	cfg.StateDir = t.TempDir()
	cfg.AllowedImages = []string{"sha256:python", "sha256:shell"}
	cfg.PoolSize = 0
	log := slog.New(slog.DiscardHandler)
	store, err := artifacts.OpenStore(t.TempDir(), artifacts.DefaultStoreOptions())
	if err != nil {
		t.Fatal(err)
	}
	svc, err := task.New(context.Background(), fake.New(fake.TestProgram), cfg, task.WithDisk(taskdir.FolderDisk{}), task.WithLogger(log),
		task.WithTools(reg, sbtools.DefaultLimits()), task.WithArtifacts(store))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Shutdown(context.Background()) })
	s, err := NewServer(ctx, svc, Options{Version: "test", OutputBytes: 4096, Wait: wait, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestToolCallsPassTheSixGates drives a run's channel against a real MCP
// server: each gate refuses on its own, in order, and a call that passes
// them all reaches the server with its idempotency key.
func TestToolCallsPassTheSixGates(t *testing.T) {
	srv, reg := newOrders(t)
	var audited []sbtools.Call
	var mu sync.Mutex
	conf := &confirmer{answer: true}
	lim := sbtools.DefaultLimits()
	lim.CallTimeout = 300 * time.Millisecond
	cfg := sbtools.Config{Registry: reg, RunID: "r1", Tenant: "team-a", Key: "retry-me",
		Grants: []string{"orders.*"}, Requested: []string{"orders.search", "orders.refund", "orders.fail", "orders.slow"},
		Limits: lim, Confirmer: conf,
		Audit: func(c sbtools.Call) { mu.Lock(); audited = append(audited, c); mu.Unlock() }}
	run := sbtools.NewChannel(context.Background(), cfg)
	ch := openChannel(t, run)

	list := ch.ask(`{"id":1,"op":"list"}`)
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name+" ("+string(tl.Risk)+"): "+tl.Description)
		if tl.InputSchema != nil {
			t.Errorf("list gave %s's schema: it comes with describe", tl.Name)
		}
	}
	want := []string{"orders.fail (read): Always fails.", "orders.refund (high): Refund an order.", "orders.search (read): Find orders whose text matches query.", "orders.slow (read): Answers after seconds."}
	if !slices.Equal(names, want) {
		t.Errorf("list = %q, want %q (note is not requested)", names, want)
	}
	if d := ch.ask(`{"id":2,"op":"describe","tool":"orders.search"}`); d.Tool == nil || !strings.Contains(string(d.Tool.InputSchema), `"query"`) {
		t.Errorf("describe = %+v, want the schema", d)
	}

	for _, tc := range []struct {
		name, tool, args, kind, field, msg string
	}{
		{"Unregistered", "orders.nope", `{}`, "refused", "", `no tool "orders.nope" is registered`},
		{"UnknownProvider", "billing.pay", `{}`, "refused", "", `no tool "billing.pay"`},
		{"NotRequested", "orders.note", `{"text":"x"}`, "refused", "", "not granted to the request"},
		{"WrongType", "orders.search", `{"query":5}`, "invalid_arguments", "query", "query"},
		{"Missing", "orders.search", `{}`, "invalid_arguments", "query", "query"},
		{"Unknown", "orders.search", `{"query":"a","colour":"red"}`, "invalid_arguments", "colour", "colour: is not an argument of orders.search (it takes limit, query)"},
		{"ToolFailed", "orders.fail", `{}`, "failed", "", "the warehouse is closed"},
		{"TimedOut", "orders.slow", `{"seconds":5}`, "timed_out", "", "did not answer within 300ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := ch.call(9, tc.tool, tc.args)
			if a.Error == nil || a.Error.Kind != tc.kind || a.Error.Field != tc.field || !strings.Contains(a.Error.Message, tc.msg) {
				t.Errorf("%s(%s) = %+v, want a %s error naming %q", tc.tool, tc.args, a.Error, tc.kind, tc.msg)
			}
		})
	}
	ok := ch.call(3, "orders.search", `{"query":"lamp","limit":1}`)
	if ok.Error != nil || string(ok.Result) != `{"orders":[{"id":"A-1","query":"lamp","total":42.5}]}` || string(ok.ID) != "3" {
		t.Errorf("search = %s %+v, want one order", ok.Result, ok.Error)
	}
	refund := ch.call(4, "orders.refund", `{"order_id":"A-1","api_key":"hunter2"}`)
	if refund.Error != nil || string(refund.Result) != `"refunded A-1"` {
		t.Errorf("refund = %s %+v", refund.Result, refund.Error)
	}
	if len(conf.asked) != 1 || strings.Contains(conf.asked[0], "hunter2") {
		t.Errorf("the confirmer was asked %q: once, without the writeOnly api_key", conf.asked)
	}
	if got := srv.Authorization(); got != "Bearer orders-secret" {
		t.Errorf("the server saw Authorization %q", got)
	}
	ch.close()

	calls := run.Calls()
	var search, rf *sbtools.Call
	for i := range calls {
		switch {
		case calls[i].Tool == "orders.search" && calls[i].Outcome == "ok":
			search = &calls[i]
		case calls[i].Tool == "orders.refund":
			rf = &calls[i]
		}
	}
	if search == nil || rf == nil {
		t.Fatalf("the record lacks the calls: %+v", calls)
	}
	var gates []string
	for _, g := range search.Gates {
		gates = append(gates, g.Gate+":"+g.Decision)
	}
	if want := "registry:pass permission:pass validation:pass confirmation:pass idempotency:pass audit:pass"; strings.Join(gates, " ") != want {
		t.Errorf("gates %q, want %q", gates, want)
	}
	if strings.Contains(string(rf.Arguments), "hunter2") || !strings.Contains(string(rf.Arguments), "redacted sha256:") || rf.Key == "" {
		t.Errorf("refund recorded as %s key %q: the api_key redacted, the key kept", rf.Arguments, rf.Key)
	}
	if run.Made() != 10 || len(audited) != 10 {
		t.Errorf("made %d calls, audited %d; want 10 each", run.Made(), len(audited))
	}

	// The same run retried (same tenant and key) sends the same key: the
	// server does the write once.
	again := sbtools.NewChannel(context.Background(), cfg)
	ch2 := openChannel(t, again)
	for i := 0; i < 9; i++ {
		// The retry makes the same calls, so the refund is again the
		// tenth of the run.
		ch2.call(9, "orders.nope", `{}`)
	}
	if a := ch2.call(4, "orders.refund", `{"order_id":"A-1"}`); a.Error != nil {
		t.Fatalf("retried refund: %+v", a.Error)
	}
	ch2.close()
	if srv.Writes() != 1 {
		t.Errorf("the server did %d refunds, want 1: the retried run's write has the first one's key", srv.Writes())
	}
	if k1, k2 := rf.Key, again.Calls()[len(again.Calls())-1].Key; k1 != k2 {
		t.Errorf("keys %q and %q differ", k1, k2)
	}
}

func TestHighRiskCallsNeedTheCallersYes(t *testing.T) {
	srv, reg := newOrders(t)
	for _, tc := range []struct {
		name string
		conf sbtools.Confirmer
		msg  string
		kind string
	}{
		{"NoOneToAsk", nil, "cannot be asked", "needs_confirmation"},
		{"Declined", &confirmer{answer: false}, "the caller declined orders.refund", "declined"},
		{"NoAnswerInTime", &confirmer{wait: true}, "did not confirm orders.refund within 100ms", "declined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := sbtools.DefaultLimits()
			lim.ConfirmTimeout = 100 * time.Millisecond
			run := sbtools.NewChannel(context.Background(), sbtools.Config{Registry: reg, RunID: tc.name, Grants: []string{"*"}, Requested: []string{"*"}, Limits: lim, Confirmer: tc.conf})
			a := openChannel(t, run).call(1, "orders.refund", `{"order_id":"A-1"}`)
			if a.Error == nil || a.Error.Kind != tc.kind || !strings.Contains(a.Error.Message, tc.msg) {
				t.Errorf("refund = %+v, want %s: %q", a.Error, tc.kind, tc.msg)
			}
		})
	}
	if srv.Writes() != 0 {
		t.Errorf("%d refunds were done without a yes", srv.Writes())
	}
}

// TestHostileChannelIsRefusedWithoutHarm floods the channel, sends
// garbage and oversized requests, and goes past the run's call limit.
func TestHostileChannelIsRefusedWithoutHarm(t *testing.T) {
	_, reg := newOrders(t)
	lim := sbtools.DefaultLimits()
	lim.Calls, lim.RequestBytes = 3, 1024
	run := sbtools.NewChannel(context.Background(), sbtools.Config{Registry: reg, RunID: "hostile", Grants: []string{"*"}, Requested: []string{"orders.search"}, Limits: lim})
	ch := openChannel(t, run)
	if a := ch.ask("not json"); a.Error == nil || a.Error.Kind != "bad_request" {
		t.Errorf("garbage = %+v", a.Error)
	}
	if a := ch.ask(`{"id":1,"op":"call","tool":"orders.search","arguments":{"query":"` + strings.Repeat("x", 4096) + `"}}`); a.Error == nil || a.Error.Kind != "limit" || string(a.ID) != "null" {
		t.Errorf("oversized = %s %+v, want a limit error with no id", a.ID, a.Error)
	}
	if a := ch.ask(`{"id":1,"op":"rm -rf"}`); a.Error == nil || a.Error.Kind != "bad_request" {
		t.Errorf("unknown op = %+v", a.Error)
	}
	for i := 1; i <= 3; i++ {
		if a := ch.call(i, "orders.search", `{"query":"q"}`); a.Error != nil {
			t.Fatalf("call %d: %+v", i, a.Error)
		}
	}
	if a := ch.call(4, "orders.search", `{"query":"q"}`); a.Error == nil || a.Error.Kind != "limit" || !strings.Contains(a.Error.Message, "made its 3 calls") {
		t.Errorf("the fourth call = %+v, want the limit", a.Error)
	}
}

// TestMCPHostsCallToolsAndConfirmByElicitation runs programs that call
// tools through the MCP tools: the schema names the operator's tools, a
// host that declared elicitation is asked about a high-risk call (by a
// request on 2025-11-25, through the call's answer on 2026-07-28) and its
// answer holds, and one that cannot be asked gets the call refused.
func TestMCPHostsCallToolsAndConfirmByElicitation(t *testing.T) {
	srv, reg := newOrders(t)
	s := ordersServer(t, context.Background(), reg, 0)
	var asked []string
	client := func(elicit bool, revision string) *mcpsdk.ClientSession {
		st, ct := mcpsdk.NewInMemoryTransports()
		ss, err := s.Connect(context.Background(), st, nil)
		if err != nil {
			t.Fatal(err)
		}
		opts := &mcpsdk.ClientOptions{}
		if elicit {
			opts.ElicitationHandler = func(_ context.Context, r *mcpsdk.ElicitRequest) (*mcpsdk.ElicitResult, error) {
				asked = append(asked, r.Params.Message)
				return &mcpsdk.ElicitResult{Action: "accept", Content: map[string]any{"allow": strings.Contains(r.Params.Message, "A-1")}}, nil
			}
		}
		cs, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "host", Version: "1"}, opts).Connect(context.Background(), ct, &mcpsdk.ClientSessionOptions{ProtocolVersion: revision})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close(); ss.Wait() })
		return cs
	}
	refund := func(cs *mcpsdk.ClientSession, order string) string {
		res, out := call(t, cs, "run_command", map[string]any{
			"argv":  []string{"testprog", "call", `{"id":1,"op":"call","tool":"orders.refund","arguments":{"order_id":"` + order + `"}}`},
			"tools": []string{"orders.refund"},
		})
		if out["status"] != "OK" {
			t.Fatalf("run_command: %s", text(res))
		}
		return out["stdout"].(string)
	}

	host := client(true, "2025-11-25")
	list, err := host.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range list.Tools {
		if tool.Name != "run_code" {
			continue
		}
		b, _ := json.Marshal(tool.InputSchema)
		for _, want := range []string{`"orders.refund"`, `"orders.*"`, "orders.refund (high, each call needs your confirmation): Refund an order."} {
			if !strings.Contains(string(b), want) {
				t.Errorf("run_code's schema lacks %s: %s", want, b)
			}
		}
	}
	if got := refund(host, "A-1"); got != `{"id":1,"result":"refunded A-1"}`+"\n" {
		t.Errorf("a confirmed refund answered %s", got)
	}
	if got := refund(host, "A-2"); !strings.Contains(got, `"kind":"declined"`) {
		t.Errorf("a refused refund answered %s", got)
	}
	if len(asked) != 2 || !strings.Contains(asked[0], "orders.refund") {
		t.Errorf("the host was asked %q", asked)
	}
	// A 2026-07-28 host is asked through its call's answer: the SDK's
	// client puts the question to its elicitation handler and retries.
	host2026 := client(true, "2026-07-28")
	if got := refund(host2026, "A-1"); got != `{"id":1,"result":"refunded A-1"}`+"\n" {
		t.Errorf("a refund confirmed through the answer answered %s", got)
	}
	if got := refund(host2026, "A-2"); !strings.Contains(got, `"kind":"declined"`) {
		t.Errorf("a refund refused through the answer answered %s", got)
	}
	if len(asked) != 4 || !strings.Contains(asked[3], "A-2") {
		t.Errorf("the 2026-07-28 host was asked %q", asked[2:])
	}
	for _, revision := range []string{"2025-11-25", "2026-07-28"} {
		if got := refund(client(false, revision), "A-1"); !strings.Contains(got, `"kind":"needs_confirmation"`) {
			t.Errorf("a host that cannot be asked (no elicitation, %s): %s", revision, got)
		}
	}
	if srv.Writes() != 2 {
		t.Errorf("the server did %d refunds, want the two confirmed", srv.Writes())
	}
}

// TestToolServerStartedAsACommand speaks to a tool server that sandboxd
// starts and talks to on its stdin and stdout, and starts it again once
// it has gone.
func TestToolServerStartedAsACommand(t *testing.T) {
	bin := testutil.BuildStatic(t, "./internal/testutil/toolserver/cmd/orders-mcp")
	ts, err := NewToolServer("orders", bin, nil, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for round := 1; round <= 2; round++ {
		list, err := ts.Tools(ctx)
		if err != nil || len(list) != 5 {
			t.Fatalf("round %d: Tools() = %d tools, %v", round, len(list), err)
		}
		res, err := ts.Call(ctx, "search", json.RawMessage(`{"query":"cmd"}`), "k")
		if err != nil || !strings.Contains(string(res), `"query":"cmd"`) {
			t.Fatalf("round %d: Call() = %s, %v", round, res, err)
		}
		// The server's process ends: the next use starts it again.
		ts.Close()
	}
	if _, err := NewToolServer("orders", "/nonexistent/orders-mcp --flag", nil, "test"); err == nil || !strings.Contains(err.Error(), "/nonexistent/orders-mcp") {
		t.Errorf("a command that is not there: %v", err)
	}
}

// TestToolListNamesOnlyTheCallersTools lists the tools as the operator's
// caller and as a tenant granted one tool and one image: the tenant's
// run_code names that tool alone, the operator's every tool, and the
// tenant's run_code, run_command and create_session name only the
// languages and images of its image.
func TestToolListNamesOnlyTheCallersTools(t *testing.T) {
	_, reg := newOrders(t)
	s := ordersServer(t, access.WithCaller(context.Background(), access.Operator), reg, 0)
	for _, tc := range []struct {
		name   string
		caller access.Caller
		want   string
	}{
		{"operator", access.Caller{Name: "operator", Operator: true}, "orders.fail orders.note orders.refund orders.search orders.slow orders.*"},
		{"tenant", access.Caller{Name: "team-a", Tenant: &access.Tenant{Tools: []string{"orders.search"}, Images: []string{"sandboxd/shell"}}}, "orders.search orders.*"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const token = "a-token-of-sixteen-or-more"
			srv := httptest.NewServer(HTTPHandler(s, HTTPOptions{Identities: access.NewIdentities(token, tc.caller, false)}))
			defer srv.Close()
			transport := &mcpsdk.StreamableClientTransport{Endpoint: srv.URL + Path, HTTPClient: &http.Client{Transport: &headerRecorder{token: token}}}
			cs, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "host", Version: "1"}, nil).Connect(context.Background(), transport, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			list, err := cs.ListTools(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			enums := map[string]string{}
			for _, tool := range list.Tools {
				b, _ := json.Marshal(tool.InputSchema)
				var in struct {
					Properties map[string]struct {
						Description string
						Enum        []string
						Items       struct{ Enum []string }
					}
				}
				json.Unmarshal(b, &in)
				for _, arg := range []string{"language", "image"} {
					if e := in.Properties[arg].Enum; e != nil {
						enums[tool.Name+"."+arg] = strings.Join(e, " ")
					}
				}
				if tc.name == "tenant" && strings.Contains(tool.Description, "sandboxd/python") {
					t.Errorf("the tenant's %s names an image it may not use: %q", tool.Name, tool.Description)
				}
			}
			if tc.name == "tenant" {
				want := map[string]string{"run_code.language": "bash sh", "run_command.image": "sandboxd/shell",
					"create_session.language": "shell bash sh", "create_session.image": "sandboxd/shell"}
				if !maps.Equal(enums, want) {
					t.Errorf("the tenant's languages and images: %v, want %v", enums, want)
				}
			} else if !strings.Contains(enums["run_code.language"], "python") {
				t.Errorf("the operator's languages: %v", enums)
			}
			for _, tool := range list.Tools {
				if tool.Name != "run_code" {
					continue
				}
				b, _ := json.Marshal(tool.InputSchema)
				var in struct {
					Properties map[string]struct {
						Description string
						Items       struct{ Enum []string }
					}
				}
				json.Unmarshal(b, &in)
				p := in.Properties["tools"]
				if got := strings.Join(p.Items.Enum, " "); got != tc.want {
					t.Errorf("run_code's tools = %q, want %q", got, tc.want)
				}
				if tc.name == "tenant" && strings.Contains(p.Description, "refund") {
					t.Errorf("the tenant's description names a tool it is not granted: %q", p.Description)
				}
				return
			}
			t.Fatal("no run_code in tools/list")
		})
	}
}

// TestAChangedToolListIsListedAgain adds a tool to a tool server that
// sandboxd has listed: the server says so, and the registry lists the new
// tool at once rather than when its copy goes stale (30 seconds).
func TestAChangedToolListIsListedAgain(t *testing.T) {
	srv, reg := newOrders(t)
	ctx := context.Background()
	names := func() string {
		var out []string
		for _, tool := range reg.Granted(ctx, []string{"*"}) {
			out = append(out, tool.Name)
		}
		return strings.Join(out, " ")
	}
	if got := names(); strings.Contains(got, "orders.label") || !strings.Contains(got, "orders.search") {
		t.Fatalf("before: %q", got)
	}
	srv.AddTool("label")
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(names(), "orders.label") {
		if time.Now().After(deadline) {
			t.Fatalf("5 s after the server's tools changed, the registry lists %q", names())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTaskAsksTheHost: a program that asks for a high-risk call after
// its call became a task waits on the task's question: tasks/get shows
// it as input_required with an elicitation, tasks/update answers, and the
// refund happens once, confirmed; a declined one does not.
func TestTaskAsksTheHost(t *testing.T) {
	srv, reg := newOrders(t)
	s := ordersServer(t, context.Background(), reg, 100*time.Millisecond)
	const token = "secret-token-123456"
	web := httptest.NewServer(HTTPHandler(s, HTTPOptions{Identities: access.NewIdentities(token, access.Caller{Name: "token"}, false)}))
	defer web.Close()
	rpc := httpRPC(t, web.URL+Path, token)
	for _, allow := range []bool{true, false} {
		call := map[string]any{"name": "run_command", "_meta": map[string]any{}, "arguments": map[string]any{
			"argv":  []string{"testprog", "sleep", "400", "call", `{"id":1,"op":"call","tool":"orders.refund","arguments":{"order_id":"T-1"}}`},
			"tools": []string{"orders.refund"},
		}}
		p := framed(call, true)
		p["_meta"].(map[string]any)[mcpsdk.MetaKeyClientCapabilities].(map[string]any)["elicitation"] = map[string]any{}
		created, werr := rpc("tools/call", p)
		if werr != nil || created["resultType"] != "task" {
			t.Fatalf("the call: %v %v", created, werr)
		}
		id := created["taskId"].(string)
		got := pollTask(t, rpc, id, "input_required")
		var key string
		for k, q := range got["inputRequests"].(map[string]any) {
			params, _ := q.(map[string]any)["params"].(map[string]any)
			if q.(map[string]any)["method"] != "elicitation/create" || !strings.Contains(params["message"].(string), "orders.refund") {
				t.Fatalf("the question: %v", q)
			}
			key = k
		}
		answer := map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"allow": allow}}}
		if _, werr := rpc("tasks/update", framed(map[string]any{"taskId": id, "inputResponses": answer}, true)); werr != nil {
			t.Fatal(werr)
		}
		got = pollTask(t, rpc, id, "completed")
		res, _ := got["result"].(map[string]any)
		out, _ := res["structuredContent"].(map[string]any)
		if out == nil {
			t.Fatalf("allow %v: the finished task: %v", allow, got)
		}
		want := `"kind":"declined"`
		if allow {
			want = `refunded T-1`
		}
		if !strings.Contains(out["stdout"].(string), want) {
			t.Errorf("allow %v: the program saw %v", allow, out["stdout"])
		}
	}
	// Asked before the wait is over, the question comes back as the call's
	// input-required answer, and the SDK's client retries over HTTP, each
	// request standing alone.
	transport := &mcpsdk.StreamableClientTransport{Endpoint: web.URL + Path, HTTPClient: &http.Client{Transport: &headerRecorder{token: token}}}
	host, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "host", Version: "1"}, &mcpsdk.ClientOptions{
		ElicitationHandler: func(context.Context, *mcpsdk.ElicitRequest) (*mcpsdk.ElicitResult, error) {
			return &mcpsdk.ElicitResult{Action: "accept", Content: map[string]any{"allow": true}}, nil
		}}).Connect(context.Background(), transport, &mcpsdk.ClientSessionOptions{ProtocolVersion: statelessVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	res, out := call(t, host, "run_command", map[string]any{
		"argv":  []string{"testprog", "call", `{"id":1,"op":"call","tool":"orders.refund","arguments":{"order_id":"T-2"}}`},
		"tools": []string{"orders.refund"},
	})
	if !strings.Contains(fmt.Sprint(out["stdout"]), "refunded T-2") {
		t.Errorf("a refund confirmed through the answer, over HTTP: %s", text(res))
	}
	if srv.Writes() != 2 {
		t.Errorf("the server did %d refunds, want the two confirmed", srv.Writes())
	}
}
