package inbound

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/server/servertest"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/session"
)

// sessionServer stands for a dev server in a session: the fake runtime's
// sessions reach the host's loopback, where it listens. It answers with
// the Host it saw, and echoes a WebSocket's bytes after the upgrade.
func sessionServer(t *testing.T) int {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			io.WriteString(w, "hello from "+r.Host+" for "+r.Header.Get("X-Forwarded-Host"))
			return
		}
		conn, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		rw.Flush()
		io.Copy(conn, rw)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(u.Port())
	return port
}

// TestProxyReachesAnOpenPortOnly: a request with the port's token reaches
// the session's server, HTTP and WebSocket alike; a wrong token, a closed
// port and another tenant are refused.
func TestProxyReachesAnOpenPortOnly(t *testing.T) {
	svc := servertest.NewEngine(t, fake.TestProgram, func(c *task.Config) {
		c.MaxSessions, c.InboundURL = 2, "http://{token}.localhost:8090/"
	})
	ctx := context.Background()
	sess, err := svc.CreateSession(ctx, session.Request{})
	if err != nil {
		t.Fatal(err)
	}
	port := sessionServer(t)
	open, err := svc.OpenPort(ctx, sess.ID, port)
	if err != nil {
		t.Fatal(err)
	}
	if open.URL != "http://"+open.Token+".localhost:8090/" {
		t.Fatalf("URL %q", open.URL)
	}
	proxy := httptest.NewServer(New(svc, slog.New(slog.DiscardHandler)))
	t.Cleanup(proxy.Close)
	get := func(host string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", proxy.URL+"/", nil)
		req.Host = host
		resp, err := proxy.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	host := open.Token + ".localhost:8090"
	if code, body := get(host); code != 200 || body != "hello from localhost:"+strconv.Itoa(port)+" for "+host {
		t.Fatalf("through the proxy: %d %q", code, body)
	}
	wrong := strings.Repeat("0", 32) + ".localhost:8090"
	for _, h := range []string{wrong, "localhost:8090", open.Token[:31] + ".localhost"} {
		if code, _ := get(h); code != 404 {
			t.Errorf("Host %q: %d, want 404", h, code)
		}
	}

	// A WebSocket: the upgrade, then bytes both ways.
	conn, err := net.Dial("tcp", strings.TrimPrefix(proxy.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: "+host+"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v, %v", resp, err)
	}
	io.WriteString(conn, "ping")
	got := make([]byte, 4)
	if _, err := io.ReadFull(r, got); err != nil || string(got) != "ping" {
		t.Fatalf("after the upgrade: %q, %v", got, err)
	}

	other := access.WithCaller(ctx, access.Caller{Name: "team-b"})
	if _, err := svc.OpenPort(other, sess.ID, port); !errdefs.IsNotFound(err) {
		t.Fatalf("another tenant's OpenPort: %v, want not found", err)
	}
	if err := svc.ClosePort(ctx, sess.ID, port); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(host); code != 404 {
		t.Fatalf("a closed port: %d, want 404", code)
	}
	// Nothing listens: the proxy says so.
	reopened, err := svc.OpenPort(ctx, sess.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get(reopened.Token + ".localhost"); code != 502 || !strings.Contains(body, "port 1 of session") {
		t.Fatalf("a port nothing listens on: %d %q", code, body)
	}
}
