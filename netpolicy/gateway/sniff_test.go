package gateway

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestSniff reads the name of a connection's first bytes and consumes
// none of them. A ClientHello's record length is two bytes, big-endian:
// read with | where + was meant, it came out short for most lengths and
// the name was lost.
func TestSniff(t *testing.T) {
	for _, tt := range []struct {
		name      string
		in        []byte
		wantName  string
		wantVia   string
		sizeLimit int
	}{
		{"tls", clientHello("API.test"), "api.test", "sni", 0},
		{"tls without a name", clientHello(""), "", "", 0},
		{"http", []byte("GET / HTTP/1.1\r\nHost: api.test:8080\r\n\r\n"), "api.test", "host", 0},
		{"short put", []byte("PUT /x HTTP/1.1\r\nHost: put.test\r\n\r\n"), "put.test", "host", 0},
		{"h2c", []byte(h2Preface), "", "h2c", 0},
		{"no end of header", []byte("GET / HTTP/1.1\r\nHost: a.test\r\n"), "", "", 0},
		{"header past the buffer", []byte("GET / HTTP/1.1\r\nX: " + strings.Repeat("a", 64) + "\r\n\r\n"), "", "", 32},
		{"binary", []byte{0x00, 0x01, 0x02}, "", "", 0},
		{"nothing", nil, "", "", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			size := 16 << 10
			if tt.sizeLimit > 0 {
				size = tt.sizeLimit
			}
			br := bufio.NewReaderSize(strings.NewReader(string(tt.in)), size)
			name, via := sniff(br)
			if name != tt.wantName || via != tt.wantVia {
				t.Errorf("sniff = %q, %q; want %q, %q", name, via, tt.wantName, tt.wantVia)
			}
			if rest, _ := io.ReadAll(br); string(rest) != string(tt.in) {
				t.Errorf("sniff consumed what it read")
			}
		})
	}
}

// TestSniffEveryHelloLength: names of every length from 1 to 64 bytes
// make ClientHellos of as many record lengths, each read whole.
func TestSniffEveryHelloLength(t *testing.T) {
	for n := 1; n <= 64; n++ {
		name := strings.Repeat("a", n) + ".test"
		br := bufio.NewReaderSize(strings.NewReader(string(clientHello(name))), 16<<10)
		if got, via := sniff(br); got != name || via != "sni" {
			t.Errorf("a ClientHello for %s: %q, %q", name, got, via)
		}
	}
}

// clientHello is a ClientHello for name as crypto/tls writes it, caught
// on its way out.
func clientHello(name string) []byte {
	client, server := net.Pipe()
	defer server.Close()
	go tls.Client(client, &tls.Config{ServerName: name, InsecureSkipVerify: true}).Handshake()
	head := make([]byte, 5)
	io.ReadFull(server, head)
	rest := make([]byte, int(head[3])<<8|int(head[4]))
	io.ReadFull(server, rest)
	client.Close()
	return append(head, rest...)
}

// TestSniffDoesNotWaitOnOtherProtocols: a client that opens with
// capitals and then waits for its server (SSH's banner, Redis's inline
// commands) is let through at its first line; an HTTP request split
// across writes is still read to the end of its header.
func TestSniffDoesNotWaitOnOtherProtocols(t *testing.T) {
	for _, tt := range []struct {
		writes []string
		want   string
	}{
		{[]string{"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n"}, ""},
		{[]string{"PING\r\n"}, ""},
		{[]string{"SET key value\r\n"}, ""},
		{[]string{"EHLO client.test\n"}, ""},
		{[]string{"GET / HTTP/1.1\r\nHo", "st: split.test\r\n", "\r\n"}, "split.test"},
		{[]string{"POST /x HT", "TP/1.1\r\nHost: post.test\r\n\r\n"}, "post.test"},
	} {
		client, server := net.Pipe()
		go func() {
			for _, w := range tt.writes {
				io.WriteString(client, w)
			}
			// Then silence, as a client waiting for its server: no EOF.
		}()
		got := make(chan string, 1)
		go func() {
			name, _ := sniff(bufio.NewReaderSize(server, 16<<10))
			got <- name
		}()
		select {
		case name := <-got:
			if name != tt.want {
				t.Errorf("%q: sniffed %q, want %q", tt.writes, name, tt.want)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%q: sniff still waits for bytes a waiting client never sends", tt.writes)
		}
		client.Close()
		server.Close()
	}
}
