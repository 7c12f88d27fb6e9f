//go:build integration

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/audit"
	"github.com/sandboxd/sandboxd/internal/testutil/toolserver"
)

// TestToolServerCallRecordAndReplay is the operator's and the reviewer's
// path through the tool bridge: a daemon with an MCP tool server and its
// token, a program calling it from `sandboxd run --tool`, the calls in
// the audit log and in `inspect`, and a replay answered from the record
// with the tool server gone.
func TestToolServerCallRecordAndReplay(t *testing.T) {
	requireDocker(t)
	srv := toolserver.Start(t)
	dir := t.TempDir()
	token := filepath.Join(dir, "orders.token")
	if err := os.WriteFile(token, []byte("orders-secret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auditLog := filepath.Join(dir, "audit.log")
	d := startDaemon(t, t.TempDir(), instanceName(t), "--tool-server", "orders="+srv.URL, "--tool-server-token", "orders="+token, "--audit-log", auditLog)

	program := `from sandboxd import tools
hits = tools.orders.search(query="lamp")["orders"]
try:
    tools.orders.refund(order_id=hits[0]["id"])
except tools.NeedsConfirmation as e:
    print("refund:", type(e).__name__)
print(len(hits), "orders, first", hits[0]["id"])
`
	stdout, stderr, exit := runCLI(t, d, "--tool", "orders.search", "--tool", "orders.refund", "--lang", "python", "-c", program)
	if exit != 0 || stdout != "refund: NeedsConfirmation\n2 orders, first A-1\n" {
		t.Fatalf("run: exit %d, stdout %q, stderr %q", exit, stdout, stderr)
	}
	if out, code := cli(t, "images", "--socket", d.socket); code != 0 || !strings.Contains(out, "orders.refund  high   Refund an order.") {
		t.Errorf("images: %d\n%s", code, out)
	}
	if got := srv.Authorization(); got != "Bearer orders-secret-token" {
		t.Errorf("the tool server saw Authorization %q", got)
	}
	// Not granted by the request: refused at the permission gate.
	if stdout, _, _ := runCLI(t, d, "--tool", "orders.search", "--lang", "python", "-c", "from sandboxd import tools\ntry:\n    tools.call('orders.note', text='x')\nexcept tools.Refused as e:\n    print(e)"); !strings.Contains(stdout, "tool orders.note is not granted to the request") {
		t.Errorf("an ungranted call: %q", stdout)
	}

	digest := runDigest(t, d, "--tool", "orders.*", "--lang", "python", "-c", "from sandboxd import tools\nprint(tools.orders.search(query='desk', limit=1))")
	file := filepath.Join(dir, "run.tar.zst")
	out, code := cli(t, "bundle", "get", digest, "-o", file, "--socket", d.socket)
	if code != 0 {
		t.Fatalf("bundle get: %d %s", code, out)
	}
	out, code = cli(t, "inspect", file)
	if code != 0 || !strings.Contains(out, "tools         orders.*; 3 requests") || !strings.Contains(out, "tool call     #1 call orders.search: ok (read risk)") {
		t.Fatalf("inspect: %d\n%s", code, out)
	}
	srv.Stop()
	out, code = cli(t, "replay", "--socket", d.socket, file)
	if code != 0 || !strings.Contains(out, "reproduced") || strings.Contains(out, "NOT") {
		t.Fatalf("replay with the tool server stopped: exit %d\n%s", code, out)
	}

	var calls []audit.Event
	for _, e := range auditEvents(t, auditLog) {
		if e.Kind == audit.KindToolCall {
			calls = append(calls, e)
		}
	}
	var got []string
	for _, e := range calls {
		line := e.Tool + " " + e.Decision + " " + e.Code + " " + e.Status
		if e.RecordedFrom != "" {
			line += " from " + e.RecordedFrom
		}
		got = append(got, line)
		if e.ArgumentsDigest == "" || e.RunID == "" || e.Tenant != "operator" {
			t.Errorf("audit line %+v lacks the run, tenant or arguments' digest", e)
		}
	}
	// The replay's call is audited too, as answered from the record of
	// the bundle it replays: no tool was called.
	want := "orders.search accepted  ok|orders.refund refused confirmation needs_confirmation|orders.note refused permission refused|orders.search accepted  ok|orders.search accepted  ok from " + digest
	if strings.Join(got, "|") != want {
		t.Errorf("audit tool calls:\n%s\nwant\n%s", strings.Join(got, "|"), want)
	}
}
