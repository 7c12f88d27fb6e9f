//go:build integration

package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/internal/testutil/toolserver"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/mcp"
	"github.com/sandboxd/sandboxd/reproducer"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
	"github.com/sandboxd/sandboxd/task/tools"
)

// toolsGroup runs programs that call tools, from inside the sandbox with
// no network, on a real MCP server: the library, each gate as the
// program sees it, commands, the bundle's record, and a hostile channel.
// The gates are the daemon's, the channel the init's: the contract
// suite's ToolChannelBesideTheStreams holds its plumbing on every pair.
func toolsGroup() grouped {
	return group[*toolsEnv]{"Tools", newToolsEnv, []kase[*toolsEnv]{
		{"ProgramCallsThroughTheGates", Logic, testProgramCallsThroughTheGates},
		{"CallerToolsAndConfirmation", Logic, testCallerToolsAndConfirmation},
		{"SessionCallsEachWithTheirTools", Logic, testSessionCallsEachWithTheirTools},
		{"JavaScriptAndTypeScript", Logic, testJavaScriptAndTypeScript},
		{"CommandFindsTheLibrary", Logic, testCommandFindsTheLibrary},
		{"HostileChannelHarmsOnlyItsRun", Logic, testHostileChannelHarmsOnlyItsRun},
	}}
}

// toolsEnv is the tools' service, its MCP server, and a caller's side
// with a tool of its own and a confirmer.
type toolsEnv struct {
	s    *suite
	svc  *task.Service
	srv  *toolserver.Server
	side tools.CallerSide
}

// newToolsEnv starts the MCP server and a service that may call it.
func newToolsEnv(t *testing.T, target Target) *toolsEnv {
	srv := toolserver.Start(t)
	orders, err := mcp.NewToolServer("orders", srv.URL, http.Header{}, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { orders.Close() })
	reg := tools.NewRegistry(testutil.Logger(t, slog.LevelWarn))
	if err := reg.Add("orders", orders); err != nil {
		t.Fatal(err)
	}
	lim := tools.DefaultLimits()
	lim.Calls = 50
	s := &suite{target: target, warm: true, catalog: withNode(t), taskOpts: []task.Option{task.WithTools(reg, lim)}}
	svc := s.service(t, nil)
	side := tools.CallerSide{
		Tools: []tools.Tool{{Name: "add", Description: "Adds two numbers.", Risk: tools.RiskRead,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}`)}},
		Provider:  testutil.Adder{},
		Confirmer: yes{},
	}
	return &toolsEnv{s, svc, srv, side}
}

func testProgramCallsThroughTheGates(t *testing.T, e *toolsEnv) {
	s, svc, srv := e.s, e.svc, e.srv
	req := python(toolsProgram, limits.Limits{Timeout: 60 * time.Second})
	req.Options.Tools = []string{"orders.search", "orders.refund", "orders.fail"}
	res := s.run(t, svc, req, nil)
	defer s.noContainerOfRun(t, res.RunID)
	if res.Status != run.StatusOK {
		t.Fatalf("status %s (%s)", res.Status, res.Message)
	}
	b, entries := readBundle(t, svc, res)
	var got map[string]any
	if err := json.Unmarshal(entries["stdout"], &got); err != nil {
		t.Fatalf("stdout %q: %v (stderr %q)", entries["stdout"], err, entries["stderr"])
	}
	want := map[string]any{
		"listed":     "orders.fail orders.refund orders.search",
		"help":       true,
		"first":      "A-1",
		"invalid":    "InvalidArguments query",
		"refund":     "NeedsConfirmation",
		"note":       "Refused",
		"failed":     "ToolFailed the warehouse is closed",
		"generic":    float64(2),
		"no_network": true,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if res.ToolCalls != 6 {
		t.Errorf("the result counts %d tool calls, want 6", res.ToolCalls)
	}
	if strings.Join(b.Manifest.Reproducible.Request.Tools, " ") != "orders.search orders.refund orders.fail" {
		t.Errorf("the bundle's request lets %q", b.Manifest.Reproducible.Request.Tools)
	}
	var calls []tools.Call
	sc := bufio.NewScanner(bytes.NewReader(entries[artifacts.EntryToolCalls]))
	for sc.Scan() {
		var c tools.Call
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		if c.Op == "call" {
			calls = append(calls, c)
		}
	}
	var outcomes []string
	for _, c := range calls {
		outcomes = append(outcomes, c.Tool+":"+c.Outcome)
	}
	if want := "orders.search:ok orders.search:invalid_arguments orders.refund:needs_confirmation orders.note:refused orders.fail:failed orders.search:ok"; strings.Join(outcomes, " ") != want {
		t.Errorf("the bundle records %q, want %q", outcomes, want)
	}
	if srv.Writes() != 0 {
		t.Errorf("the server did %d refunds without a confirmation", srv.Writes())
	}
}

func testCallerToolsAndConfirmation(t *testing.T, e *toolsEnv) {
	s, svc, srv, side := e.s, e.svc, e.srv, e.side
	req := python("from sandboxd import tools\nprint(tools.caller.add(a=2, b=40), tools.orders.refund(order_id='A-2'))", limits.Limits{Timeout: 60 * time.Second})
	req.Options.Tools = []string{"orders.refund"}
	if s.warm {
		ctx, cancel := context.WithTimeout(asOperator, time.Minute)
		defer cancel()
		if err := svc.PoolReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	req.Caller = side
	res, err := svc.Run(asOperator, req, &observer{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.noContainerOfRun(t, res.RunID)
	_, entries := readBundle(t, svc, res)
	if res.Status != run.StatusOK || string(entries["stdout"]) != "42 refunded A-2\n" {
		t.Errorf("status %s, stdout %q, stderr %q", res.Status, entries["stdout"], entries["stderr"])
	}
	if srv.Writes() != 1 {
		t.Errorf("the confirmed refund was done %d times", srv.Writes())
	}
}

func testSessionCallsEachWithTheirTools(t *testing.T, e *toolsEnv) {
	s, svc, side := e.s, e.svc, e.side
	sess := newSession(t, s, svc, session.Request{Language: "python"})
	var last run.Result
	kernel := func(code string, names ...string) run.Request {
		req := python(code, limits.Limits{Timeout: 60 * time.Second})
		req.Options.Tools = names
		return req
	}
	for _, tc := range []struct {
		name  string
		req   run.Request
		side  *tools.CallerSide
		out   string
		calls int
	}{
		{"kernel", kernel("from sandboxd import tools\nfirst = tools.orders.search(query='lamp', limit=1)['orders'][0]['id']\nprint(first)", "orders.search"), nil, "A-1\n", 1},
		{"kernel, no tools named", kernel("try:\n    tools.call('orders.search', {'query': 'x'})\nexcept tools.Refused as e:\n    print('refused', first)"), nil, "refused A-1\n", 1},
		{"command", run.Request{Command: &run.Command{Shell: `python3 -c 'from sandboxd import tools; print(tools.call("orders.search", {"query": "x"})["orders"][1]["id"])'`},
			Options: run.Options{Tools: []string{"orders.*"}}}, nil, "A-2\n", 1},
		{"kernel, the caller's tools", kernel("print(tools.caller.add(a=2, b=40))"), &side, "42\n", 1},
	} {
		req := tc.req
		req.Options.SessionID = sess.ID
		ctx, cancel := context.WithTimeout(asOperator, 2*time.Minute)
		if tc.side != nil {
			req.Caller = *tc.side
		}
		res, err := svc.Run(ctx, req, &observer{})
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		_, entries := readBundle(t, svc, res)
		if res.Status != run.StatusOK || string(entries["stdout"]) != tc.out || res.ToolCalls != tc.calls {
			t.Errorf("%s: status %s (%s), %d calls, stdout %q, stderr %q; want %q and %d calls", tc.name, res.Status, res.Message, res.ToolCalls, entries["stdout"], entries["stderr"], tc.out, tc.calls)
		}
		if !bytes.Contains(entries[artifacts.EntryToolCalls], []byte(`"op":"call"`)) {
			t.Errorf("%s: the bundle records no call: %q", tc.name, entries[artifacts.EntryToolCalls])
		}
		last = res
	}
	// The chain replays with each call's tool calls answered from its
	// record, the caller's included, with no caller to ask.
	ctx, cancel := context.WithTimeout(asOperator, 3*time.Minute)
	defer cancel()
	rc, err := svc.OpenBundle(ctx, last.BundleDigest)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := reproducer.Load(rc, last.BundleDigest, artifacts.DefaultReadLimits())
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	chain, err := reproducer.LoadChain(ctx, rec, svc)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := reproducer.ReplayChain(ctx, chain, svc, reproducer.Options{DefaultRuntime: s.target.OCIRuntime}, false)
	if err != nil || !rep.Reproduced || len(rep.Calls) != 4 {
		b, _ := json.MarshalIndent(rep, "", "  ")
		t.Fatalf("ReplayChain() = %v\n%s", err, b)
	}
	s.noContainerOfRun(t, rep.Session)
}

func testJavaScriptAndTypeScript(t *testing.T, e *toolsEnv) {
	s, svc := e.s, e.svc
	for _, lang := range []string{"javascript", "typescript"} {
		req := run.Request{Program: &run.Program{Language: lang, Code: jsToolsProgram}, Options: run.Options{Tools: []string{"orders.search", "orders.refund"}, Limits: limits.Limits{Timeout: 60 * time.Second}}}
		res := s.run(t, svc, req, nil)
		defer s.noContainerOfRun(t, res.RunID)
		_, entries := readBundle(t, svc, res)
		if want := "orders.refund orders.search|A-1 A-2|InvalidArguments query|NeedsConfirmation|3 at once\n"; res.Status != run.StatusOK || string(entries["stdout"]) != want {
			t.Errorf("%s: status %s, stdout %q, want %q; stderr %q", lang, res.Status, entries["stdout"], want, entries["stderr"])
		}
	}
}

func testCommandFindsTheLibrary(t *testing.T, e *toolsEnv) {
	s, svc := e.s, e.svc
	req := run.Request{Command: &run.Command{Shell: `python3 -c 'from sandboxd import tools; print(tools.orders.search(query="q")["orders"][0]["id"])'`},
		Options: run.Options{Image: "sandboxd/python", Tools: []string{"orders.*"}, Limits: limits.Limits{Timeout: 60 * time.Second}}}
	res := s.run(t, svc, req, nil)
	defer s.noContainerOfRun(t, res.RunID)
	_, entries := readBundle(t, svc, res)
	if res.Status != run.StatusOK || string(entries["stdout"]) != "A-1\n" {
		t.Errorf("status %s, stdout %q, stderr %q", res.Status, entries["stdout"], entries["stderr"])
	}
}

func testHostileChannelHarmsOnlyItsRun(t *testing.T, e *toolsEnv) {
	s, svc := e.s, e.svc
	req := python(hostileToolsProgram, limits.Limits{Timeout: 60 * time.Second})
	req.Options.Tools = []string{"orders.search"}
	res := s.run(t, svc, req, nil)
	defer s.noContainerOfRun(t, res.RunID)
	_, entries := readBundle(t, svc, res)
	if res.Status != run.StatusOK || !strings.Contains(string(entries["stdout"]), "limit 50 bad_request") {
		t.Errorf("status %s (%s), stdout %q, stderr %q", res.Status, res.Message, entries["stdout"], entries["stderr"])
	}
	// The daemon still answers the next run's calls.
	again := python(`from sandboxd import tools; print(tools.orders.search(query="x")["orders"][1]["id"])`, limits.Limits{Timeout: 60 * time.Second})
	again.Options.Tools = []string{"orders.search"}
	res = s.run(t, svc, again, nil)
	defer s.noContainerOfRun(t, res.RunID)
	_, entries = readBundle(t, svc, res)
	if string(entries["stdout"]) != "A-2\n" {
		t.Errorf("after a hostile run: stdout %q, stderr %q", entries["stdout"], entries["stderr"])
	}
}

// yes confirms every high-risk call.
type yes struct{}

func (yes) Confirm(context.Context, tools.Call) (bool, error) { return true, nil }

// toolsProgram calls tools as model-written code would, and says what it
// saw as JSON.
const toolsProgram = `
import json, pydoc, socket
from sandboxd import tools
out = {}
out["listed"] = " ".join(sorted(t["name"] for t in tools.list()))
out["help"] = "query (string, required): words to look for" in pydoc.render_doc(tools.orders.search)
out["first"] = tools.orders.search(query="lamp", limit=1)["orders"][0]["id"]
try:
    tools.orders.search(query=5)
except tools.InvalidArguments as e:
    out["invalid"] = type(e).__name__ + " " + e.field
try:
    tools.orders.refund(order_id="A-1")
except tools.ToolError as e:
    out["refund"] = type(e).__name__
try:
    tools.call("orders.note", {"text": "hi"})
except tools.ToolError as e:
    out["note"] = type(e).__name__
try:
    tools.orders.fail()
except tools.ToolFailed as e:
    out["failed"] = type(e).__name__ + " " + e.message
out["generic"] = len(tools.call("orders.search", {"query": "x"})["orders"])
try:
    socket.create_connection(("127.0.0.1", 1), timeout=1)
    out["no_network"] = False
except OSError:
    out["no_network"] = True
print(json.dumps(out))
`

// jsToolsProgram calls tools from JavaScript (and, as it is, TypeScript),
// three of them at once.
const jsToolsProgram = `
const { tools, InvalidArguments } = require("sandboxd");
(async () => {
  const out = [];
  out.push((await tools.list()).map((t) => t.name).sort().join(" "));
  out.push((await tools.orders.search({ query: "lamp" })).orders.map((o) => o.id).join(" "));
  try {
    await tools.orders.search({ query: 5 });
  } catch (e) {
    out.push((e instanceof InvalidArguments ? "InvalidArguments " : "?") + e.field);
  }
  await tools.orders.refund({ order_id: "A-1" }).catch((e) => out.push(e.name));
  const many = await Promise.all([1, 2, 3].map((n) => tools.call("orders.search", { query: "q" + n })));
  out.push(many.length + " at once");
  console.log(out.join("|"));
})();
`

// hostileToolsProgram forges frames and garbage on its channel, sends an
// oversized request, then floods calls past the run's limit.
const hostileToolsProgram = `
import os, json, socket
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=int(os.environ["SANDBOXD_TOOLS_FD"]))
f = s.makefile("rb")
s.sendall(b"\x05\x00\x00\x00\x04junk\n")
kinds = [json.loads(f.readline())["error"]["kind"]]
s.sendall(b'{"id":1,"op":"call","tool":"orders.search","arguments":{"query":"' + b"x" * (300 << 10) + b'"}}\n')
kinds.append(json.loads(f.readline())["error"]["kind"])
ok = 0
for i in range(60):
    s.sendall(json.dumps({"id": i, "op": "call", "tool": "orders.search", "arguments": {"query": "q"}}).encode() + b"\n")
    a = json.loads(f.readline())
    if "result" in a:
        ok += 1
    else:
        last = a["error"]["kind"]
print(kinds[1], ok, kinds[0], last)
`
