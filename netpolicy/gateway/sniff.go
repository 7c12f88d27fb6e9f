package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"
)

// sniffTimeout bounds how long the transparent proxy waits for a client
// to speak first; a protocol whose server speaks first goes on without a
// name after it.
const sniffTimeout = 500 * time.Millisecond

// h2Preface opens an HTTP/2 connection by prior knowledge.
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// sniff reads, without consuming, the name a connection's first bytes
// carry: the server name of a TLS ClientHello ("sni"), or the Host of an
// HTTP request ("host"); "h2c" marks HTTP/2 by prior knowledge, which
// names a host per stream.
func sniff(br *bufio.Reader) (name, via string) {
	first, err := br.Peek(1)
	if err != nil {
		return "", ""
	}
	switch {
	case first[0] == 0x16: // a TLS handshake record
		if n := serverName(br); n != "" {
			return n, "sni"
		}
	case first[0] == 'P':
		// Waits for the whole preface only while what came is its start:
		// a short PUT goes on at once.
		if b, _ := br.Peek(min(br.Buffered(), len(h2Preface))); strings.HasPrefix(h2Preface, string(b)) {
			if b, err := br.Peek(len(h2Preface)); err == nil && string(b) == h2Preface {
				return "", "h2c"
			}
		}
		if n := httpHost(br); n != "" {
			return n, "host"
		}
	case first[0] >= 'A' && first[0] <= 'Z':
		if n := httpHost(br); n != "" {
			return n, "host"
		}
	}
	return "", ""
}

// serverName parses the ClientHello in the first TLS record with
// crypto/tls, which stops at the hello.
func serverName(br *bufio.Reader) string {
	head, err := br.Peek(5)
	if err != nil {
		return ""
	}
	n := 5 + (int(head[3])<<8 | int(head[4]))
	if n > br.Size() {
		return ""
	}
	record, err := br.Peek(n)
	if err != nil {
		return ""
	}
	var name string
	errHello := errors.New("hello read")
	conn := &helloConn{r: bytes.NewReader(record)}
	tls.Server(conn, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		name = h.ServerName
		return nil, errHello
	}}).Handshake()
	return normalize(name)
}

// helloConn feeds crypto/tls a ClientHello and swallows what it writes.
type helloConn struct {
	net.Conn
	r *bytes.Reader
}

func (c *helloConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *helloConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *helloConn) Close() error                     { return nil }
func (c *helloConn) SetDeadline(time.Time) error      { return nil }
func (c *helloConn) SetReadDeadline(time.Time) error  { return nil }
func (c *helloConn) SetWriteDeadline(time.Time) error { return nil }
func (c *helloConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *helloConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }

// httpHost parses the header of the HTTP request that starts the
// connection, once it has all arrived, and returns its Host. A first line
// that is no request line ends the wait at once: protocols whose clients
// also open with capitals (SSH's banner, Redis's inline commands) then
// wait for no deadline, and their servers' answers, for nothing.
func httpHost(br *bufio.Reader) string {
	for {
		b, _ := br.Peek(br.Buffered())
		if line, _, ok := bytes.Cut(b, []byte("\n")); ok && !requestLine(line) {
			return ""
		}
		if i := bytes.Index(b, []byte("\r\n\r\n")); i >= 0 {
			req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b[:i+4])))
			if err != nil {
				return ""
			}
			host := req.Host
			if h, _, err := net.SplitHostPort(host); err == nil {
				host = h
			}
			return normalize(host)
		}
		if len(b) == br.Size() {
			return ""
		}
		// Wait for at least one more byte, no longer than the deadline.
		if _, err := br.Peek(len(b) + 1); err != nil {
			return ""
		}
	}
}

// requestLine says whether line (its LF cut) is an HTTP/1 request line:
// METHOD TARGET HTTP/x.y.
func requestLine(line []byte) bool {
	parts := strings.Split(strings.TrimSuffix(string(line), "\r"), " ")
	return len(parts) == 3 && parts[0] != "" && parts[1] != "" && strings.HasPrefix(parts[2], "HTTP/")
}

func normalize(name string) string { return strings.TrimSuffix(strings.ToLower(name), ".") }
