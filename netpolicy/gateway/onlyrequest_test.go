package gateway

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestOnlyTheFirstRequestOfAConnectionIsForwarded: of a connection that
// pipelines a request for an allowed host and one for another behind the
// same address, only the first is forwarded, asked to close; the second
// must come on a connection of its own, which is checked.
func TestOnlyTheFirstRequestOfAConnectionIsForwarded(t *testing.T) {
	wire := "GET /a HTTP/1.1\r\nHost: files.test\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\r\n" +
		"GET /b HTTP/1.1\r\nHost: other.test\r\n\r\n"
	br := bufio.NewReader(strings.NewReader(wire))
	req, err := http.ReadRequest(br)
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(onlyRequest(req, br))
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	if strings.Contains(got, "other.test") || strings.Contains(got, "/b") {
		t.Fatalf("the pipelined request went on:\n%s", got)
	}
	if !strings.Contains(got, "Connection: close") || strings.Contains(got, "keep-alive") || strings.Contains(got, "Keep-Alive") {
		t.Fatalf("the forwarded request does not ask to close:\n%s", got)
	}
}

func TestABodyIsForwardedWhole(t *testing.T) {
	wire := "POST /up HTTP/1.1\r\nHost: files.test\r\nContent-Length: 5\r\n\r\nhelloGET /x HTTP/1.1\r\nHost: other.test\r\n\r\n"
	br := bufio.NewReader(strings.NewReader(wire))
	req, _ := http.ReadRequest(br)
	out, _ := io.ReadAll(onlyRequest(req, br))
	if !strings.HasSuffix(string(out), "\r\n\r\nhello") {
		t.Fatalf("forwarded %q, want the request and its body only", out)
	}
}

func TestH2CIsRefused(t *testing.T) {
	req, _ := http.ReadRequest(bufio.NewReader(strings.NewReader("GET / HTTP/1.1\r\nHost: files.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n")))
	if err := checkRequest(req); !errors.Is(err, errH2C) {
		t.Fatalf("checkRequest(h2c upgrade) = %v", err)
	}
	ws, _ := http.ReadRequest(bufio.NewReader(strings.NewReader("GET /ws HTTP/1.1\r\nHost: files.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")))
	if err := checkRequest(ws); err != nil {
		t.Fatalf("checkRequest(websocket) = %v", err)
	}
	for _, tt := range []struct{ wire, via string }{
		{h2Preface + "\x00\x00\x00\x04\x00\x00\x00\x00\x00", "h2c"},
		{"PUT / HTTP/1.1\r\nHost: files.test\r\n\r\n", "host"},
	} {
		if _, via := sniff(bufio.NewReader(strings.NewReader(tt.wire))); via != tt.via {
			t.Errorf("sniff(%q) via %q, want %q", tt.wire[:8], via, tt.via)
		}
	}
}
