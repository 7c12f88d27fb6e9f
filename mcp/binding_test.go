package mcp

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/task/access"
)

func tokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// twoTenants serves the MCP endpoint to tenants alpha and beta, each with
// a token of its own.
func twoTenants(t *testing.T, maxSessions int) *httptest.Server {
	t.Helper()
	s, _ := newServer(t, 0)
	ids := access.NewIdentities("", access.Caller{}, false)
	ids.Set([]access.Tenant{{Name: "alpha", TokenSHA256: tokenHash("alpha-token-0123456789")}, {Name: "beta", TokenSHA256: tokenHash("beta-token-0123456789")}})
	srv := httptest.NewServer(HTTPHandler(s, HTTPOptions{Identities: ids, MaxSessions: maxSessions}))
	t.Cleanup(srv.Close)
	return srv
}

// mcpPost sends one JSON-RPC message as token, on session (or none).
func mcpPost(t *testing.T, srv *httptest.Server, token, session, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+Path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	req.Header.Set("Authorization", "Bearer "+token)
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

func openSession(t *testing.T, srv *httptest.Server, token string) string {
	t.Helper()
	resp, body := mcpPost(t, srv, token, "", initialize)
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	mcpPost(t, srv, token, id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return id
}

// TestAnotherTenantCannotRideASession is the third review's High finding:
// a request with tenant beta's valid token and alpha's Mcp-Session-Id was
// served as alpha. It is now answered as for a session that does not
// exist, and alpha's session goes on.
func TestAnotherTenantCannotRideASession(t *testing.T) {
	srv := twoTenants(t, 0)
	alpha := openSession(t, srv, "alpha-token-0123456789")
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	for _, method := range []string{http.MethodPost, http.MethodDelete} {
		var resp *http.Response
		var body string
		if method == http.MethodPost {
			resp, body = mcpPost(t, srv, "beta-token-0123456789", alpha, list)
		} else {
			req, _ := http.NewRequest(http.MethodDelete, srv.URL+Path, nil)
			req.Header.Set("Authorization", "Bearer beta-token-0123456789")
			req.Header.Set("Mcp-Session-Id", alpha)
			var err error
			if resp, err = srv.Client().Do(req); err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		if resp.StatusCode != http.StatusNotFound || strings.Contains(body, "run_code") {
			t.Fatalf("%s by beta on alpha's session: %d %s, want 404 as for an unknown session", method, resp.StatusCode, body)
		}
	}
	unknown, _ := mcpPost(t, srv, "beta-token-0123456789", "no-such-session", list)
	if unknown.StatusCode != http.StatusNotFound {
		t.Fatalf("an unknown session: %d, want 404", unknown.StatusCode)
	}
	if resp, body := mcpPost(t, srv, "alpha-token-0123456789", alpha, list); resp.StatusCode != http.StatusOK || !strings.Contains(body, "run_code") {
		t.Fatalf("alpha on its own session: %d %s", resp.StatusCode, body)
	}
}

// TestSessionsPerCallerAreBounded: 300 sessions from one caller were all
// accepted. Past MaxSessions a caller is refused with 429 and a retry
// hint; another caller is not affected, and a session ended makes room.
func TestSessionsPerCallerAreBounded(t *testing.T) {
	srv := twoTenants(t, 3)
	var ids []string
	for range 3 {
		ids = append(ids, openSession(t, srv, "alpha-token-0123456789"))
	}
	resp, body := mcpPost(t, srv, "alpha-token-0123456789", "", initialize)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "3 MCP sessions") {
		t.Fatalf("a fourth session: %d %q, want 429 naming the bound", resp.StatusCode, body)
	}
	openSession(t, srv, "beta-token-0123456789")
	req, _ := http.NewRequest(http.MethodDelete, srv.URL+Path, nil)
	req.Header.Set("Authorization", "Bearer alpha-token-0123456789")
	req.Header.Set("Mcp-Session-Id", ids[0])
	del, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	del.Body.Close()
	openSession(t, srv, "alpha-token-0123456789")
}

func TestIdleSessionsAreForgotten(t *testing.T) {
	b := newBindings(2, time.Minute)
	now := time.Now()
	b.now = func() time.Time { return now }
	b.bind("s1", "alpha")
	b.bind("s2", "alpha")
	if b.room("alpha") || !b.use("s1", "alpha") || b.use("s1", "beta") {
		t.Fatal("two sessions of alpha's: no room, s1 alpha's only")
	}
	now = now.Add(59 * time.Second)
	b.use("s1", "alpha") // s1 is used; s2 idles
	now = now.Add(2 * time.Second)
	if !b.use("s1", "alpha") || b.use("s2", "alpha") || !b.room("alpha") {
		t.Fatal("after a minute idle, s2 is forgotten and s1, used, is kept")
	}
}
