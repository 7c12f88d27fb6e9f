package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/task/access"
)

// rpcFunc sends one JSON-RPC request and returns its result, or its error.
type rpcFunc func(method string, params map[string]any) (map[string]any, *jsonrpc.Error)

// framed is params as a 2026-07-28 request carries them: with the
// protocol version, and the client's capabilities, the Tasks extension
// among them when tasks is set.
func framed(params map[string]any, tasks bool) map[string]any {
	caps := map[string]any{}
	if tasks {
		caps["extensions"] = map[string]any{tasksExtension: map[string]any{}}
	}
	meta, _ := params["_meta"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	meta[mcpsdk.MetaKeyProtocolVersion] = statelessVersion
	meta[mcpsdk.MetaKeyClientInfo] = map[string]any{"name": "test", "version": "1"}
	meta[mcpsdk.MetaKeyClientCapabilities] = caps
	out := map[string]any{"_meta": meta}
	for k, v := range params {
		if k != "_meta" {
			out[k] = v
		}
	}
	return out
}

// httpRPC posts requests to url as a 2026-07-28 client with token.
func httpRPC(t *testing.T, url, token string) rpcFunc {
	var id atomic.Int64
	return func(method string, params map[string]any) (map[string]any, *jsonrpc.Error) {
		t.Helper()
		n := id.Add(1)
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": n, "method": method, "params": params})
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", statelessVersion)
		req.Header.Set("Mcp-Method", method)
		switch {
		case method == "tools/call":
			req.Header.Set("Mcp-Name", params["name"].(string))
		case strings.HasPrefix(method, "tasks/"):
			req.Header.Set("Mcp-Name", params["taskId"].(string))
		}
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			// A JSON-RPC error may come with an HTTP error status (the
			// SDK answers a method it lacks with 404).
			b, _ := io.ReadAll(res.Body)
			var r struct {
				Error *jsonrpc.Error `json:"error"`
			}
			if json.Unmarshal(b, &r) != nil || r.Error == nil {
				t.Fatalf("%s: HTTP %s: %s", method, res.Status, b)
			}
			return nil, r.Error
		}
		var raw []byte
		if strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
			sc := bufio.NewScanner(res.Body)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && strings.Contains(d, `"id":`) {
					raw = []byte(d)
				}
			}
		} else if raw, err = io.ReadAll(res.Body); err != nil {
			t.Fatal(err)
		}
		return decodeResponse(t, method, raw)
	}
}

func decodeResponse(t *testing.T, method string, raw []byte) (map[string]any, *jsonrpc.Error) {
	t.Helper()
	var r struct {
		Result map[string]any  `json:"result"`
		Error  *jsonrpc.Error  `json:"error"`
		ID     json.RawMessage `json:"id"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || len(r.ID) == 0 {
		t.Fatalf("%s: the answer %q: %v", method, raw, err)
	}
	return r.Result, r.Error
}

// connRPC sends requests on a connection to s over stdio's transport
// wrapper, as a 2026-07-28 client does over stdio.
func connRPC(t *testing.T, s *Server) rpcFunc {
	st, ct := mcpsdk.NewInMemoryTransports()
	ctx := access.WithCaller(context.Background(), access.Operator)
	ss, err := s.Connect(ctx, taskTransport{Transport: st, h: s.h}, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := ct.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		ss.Wait()
	})
	var id atomic.Int64
	return func(method string, params map[string]any) (map[string]any, *jsonrpc.Error) {
		t.Helper()
		rid, _ := jsonrpc.MakeID(float64(id.Add(1)))
		p, _ := json.Marshal(params)
		if err := conn.Write(ctx, &jsonrpc.Request{ID: rid, Method: method, Params: p}); err != nil {
			t.Fatal(err)
		}
		for {
			msg, err := conn.Read(ctx)
			if err != nil {
				t.Fatalf("%s: %v", method, err)
			}
			if r, ok := msg.(*jsonrpc.Response); ok && r.ID == rid {
				raw, _ := jsonrpc.EncodeMessage(r)
				return decodeResponse(t, method, raw)
			}
		}
	}
}

// TestLongRunIsATask: a 2026-07-28 client that declares the Tasks
// extension gets a task for a run that outlasts the wait, over HTTP and
// stdio, and the same task for a retry with the idempotency key; tasks/get gives its output by offsets and, at the end, the
// result the call would have given; tasks/cancel stops it; another tenant
// is refused every task request; a client without the extension gets the
// RUNNING answer and the methods refuse it.
func TestLongRunIsATask(t *testing.T) {
	s, _ := newServer(t, 200*time.Millisecond)
	const token, otherToken = "secret-token-123456", "other-token-654321"
	srv := httptest.NewServer(HTTPHandler(s, HTTPOptions{Identities: access.NewIdentities(token, access.Caller{Name: "token"}, false)}))
	defer srv.Close()
	otherSrv := httptest.NewServer(HTTPHandler(s, HTTPOptions{Identities: access.NewIdentities(otherToken, access.Caller{Name: "other"}, false)}))
	defer otherSrv.Close()

	for _, tc := range []struct {
		name string
		rpc  rpcFunc
	}{
		{"http", httpRPC(t, srv.URL+Path, token)},
		{"stdio", connRPC(t, s)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rpc := tc.rpc
			d, werr := rpc("server/discover", framed(map[string]any{}, true))
			if werr != nil {
				t.Fatal(werr)
			}
			if ext, _ := d["capabilities"].(map[string]any)["extensions"].(map[string]any); ext[tasksExtension] == nil {
				t.Fatalf("server/discover does not name the extension: %v", d)
			}
			// What the server answers, discover declares (2026-07-28): prompts,
			// of which there are none.
			if caps := d["capabilities"].(map[string]any); caps["prompts"] == nil {
				t.Errorf("server/discover does not declare prompts, which the server answers: %v", caps)
			}
			if res, werr := rpc("prompts/list", framed(map[string]any{}, true)); werr != nil || len(res["prompts"].([]any)) != 0 {
				t.Errorf("prompts/list: %v %v, want an empty list", res, werr)
			}
			// The methods the extension's v2 removed are not found, with or
			// without the extension declared.
			for _, m := range []string{"tasks/result", "tasks/list"} {
				for _, declared := range []bool{true, false} {
					if _, werr := rpc(m, framed(map[string]any{"taskId": "x"}, declared)); werr == nil || werr.Code != jsonrpc.CodeMethodNotFound {
						t.Errorf("%s (extension declared: %v): %v, want %d", m, declared, werr, jsonrpc.CodeMethodNotFound)
					}
				}
			}
			if tc.name == "http" {
				// Not found before any other check: the official suite sends
				// tasks/result with no Mcp-Name.
				body := `{"jsonrpc":"2.0","id":1,"method":"tasks/result","params":{"taskId":"x"}}`
				req, _ := http.NewRequest(http.MethodPost, srv.URL+Path, strings.NewReader(body))
				for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
					"MCP-Protocol-Version": statelessVersion, "Mcp-Method": "tasks/result", "Authorization": "Bearer " + token} {
					req.Header.Set(k, v)
				}
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusNotFound || !strings.Contains(string(b), `"code":-32601`) {
					t.Errorf("tasks/result without Mcp-Name: HTTP %d %s, want 404 and -32601", res.StatusCode, b)
				}
			}
			ticks := map[string]any{"name": "run_code", "arguments": map[string]any{"language": "python", "code": "ticks", "idempotency_key": "ticks-" + tc.name}}
			created, werr := rpc("tools/call", framed(ticks, true))
			if werr != nil {
				t.Fatal(werr)
			}
			id, _ := created["taskId"].(string)
			if created["resultType"] != "task" || created["status"] != "working" || id == "" || created["createdAt"] == "" ||
				created["ttlMs"] != nil || created["pollIntervalMs"] != float64(1000) {
				t.Fatalf("the long call's answer: %v", created)
			}
			if _, ok := created["ttlMs"]; !ok {
				t.Fatal("the task has no ttlMs")
			}
			// A retry with the idempotency key is the same task.
			if again, werr := rpc("tools/call", framed(ticks, true)); werr != nil || again["taskId"] != id {
				t.Fatalf("the retry: %v %v, want task %s", again, werr, id)
			}
			seen := ""
			var got map[string]any
			for i := 0; ; i++ {
				if i == 50 {
					t.Fatalf("still %v after %d polls", got["status"], i)
				}
				offsets := map[string]any{}
				meta, _ := got["_meta"].(map[string]any)
				if o, ok := meta[outputMeta].(map[string]any); ok {
					seen += o["stdout"].(string)
					offsets = map[string]any{"stdout_offset": o["stdout_bytes"], "stderr_offset": o["stderr_bytes"]}
				}
				got, werr = rpc("tasks/get", framed(map[string]any{"taskId": id, "_meta": map[string]any{outputMeta: offsets}}, true))
				if werr != nil {
					t.Fatal(werr)
				}
				if got["resultType"] != "complete" || got["taskId"] != id {
					t.Fatalf("tasks/get: %v", got)
				}
				if got["status"] != "working" {
					break
				}
			}
			res, _ := got["result"].(map[string]any)
			out, _ := res["structuredContent"].(map[string]any)
			if got["status"] != "completed" || res["resultType"] != "complete" || out["status"] != "OK" || out["run_id"] != id || out["stdout"] != "tick\ntick\ntick\n" {
				t.Fatalf("the finished task: %v", got)
			}
			if !strings.HasPrefix(seen, "tick\n") || !strings.HasPrefix("tick\ntick\ntick\n", seen) {
				t.Errorf("the output while it ran, by offsets: %q", seen)
			}

			sleep := map[string]any{"name": "run_code", "arguments": map[string]any{"language": "python", "code": "sleep"}}
			created, werr = rpc("tools/call", framed(sleep, true))
			if werr != nil || created["resultType"] != "task" {
				t.Fatalf("the sleeping call: %v %v", created, werr)
			}
			id = created["taskId"].(string)
			if tc.name == "http" {
				other := httpRPC(t, otherSrv.URL+Path, otherToken)
				for _, m := range []string{"tasks/get", "tasks/update", "tasks/cancel"} {
					if _, werr := other(m, framed(map[string]any{"taskId": id, "inputResponses": map[string]any{}}, true)); werr == nil || werr.Code != jsonrpc.CodeInvalidParams {
						t.Errorf("another tenant's %s: %v", m, werr)
					}
				}
			}
			if ack, werr := rpc("tasks/update", framed(map[string]any{"taskId": id, "inputResponses": map[string]any{"nothing": map[string]any{"action": "accept"}}}, true)); werr != nil || ack["resultType"] != "complete" {
				t.Fatalf("tasks/update: %v %v", ack, werr)
			}
			if _, werr := rpc("tasks/get", framed(map[string]any{"taskId": id}, false)); werr == nil || werr.Code != codeMissingCapability || !strings.Contains(string(werr.Data), tasksExtension) {
				t.Errorf("tasks/get without the extension: %v", werr)
			}
			if _, werr := rpc("tasks/get", framed(map[string]any{"taskId": "no-such-task"}, true)); werr == nil || werr.Code != jsonrpc.CodeInvalidParams {
				t.Errorf("tasks/get of no task: %v", werr)
			}
			if _, werr := rpc("tasks/get", framed(map[string]any{"taskId": id, "_meta": map[string]any{outputMeta: map[string]any{"stdout_offset": -1}}}, true)); werr == nil || werr.Code != jsonrpc.CodeInvalidParams || !strings.Contains(werr.Message, "negative") {
				t.Errorf("tasks/get from a negative offset: %v", werr)
			}
			if ack, werr := rpc("tasks/cancel", framed(map[string]any{"taskId": id}, true)); werr != nil || ack["resultType"] != "complete" {
				t.Fatalf("tasks/cancel: %v %v", ack, werr)
			}
			pollTask(t, rpc, id, "cancelled")

			// Without the extension, the call answers as before.
			plain, werr := rpc("tools/call", framed(map[string]any{"name": "run_code", "arguments": map[string]any{"language": "python", "code": "ticks"}}, false))
			if werr != nil {
				t.Fatal(werr)
			}
			if out, _ := plain["structuredContent"].(map[string]any); plain["resultType"] != "complete" || out["status"] != "RUNNING" {
				t.Errorf("a call without the extension: %v", plain)
			}
		})
	}
}

// pollTask polls task id until its status is want, for up to 2 s, and
// returns it then.
func pollTask(t *testing.T, rpc rpcFunc, id, want string) map[string]any {
	t.Helper()
	var got map[string]any
	for i := 0; got["status"] != want; i++ {
		if i == 100 {
			t.Fatalf("task %s is %v, not %s", id, got, want)
		}
		if i > 0 {
			time.Sleep(20 * time.Millisecond)
		}
		var werr *jsonrpc.Error
		if got, werr = rpc("tasks/get", framed(map[string]any{"taskId": id}, true)); werr != nil {
			t.Fatal(werr)
		}
	}
	return got
}
