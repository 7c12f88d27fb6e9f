package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/netpolicy"
)

// A connection to a host one of the task's secrets names is the one the
// gateway terminates: it verifies the host's real certificate on its own
// TLS connection, shows the task a certificate of the container's CA, and
// reads each request, adding the secret to those the secret's rule names.
// Every other connection is spliced, its TLS untouched.

// secretsFor are the names of the task's secrets for requests to host.
func (s *binding) secretsFor(host string) []string {
	var out []string
	for _, n := range s.pol().Secrets {
		if sec, ok := s.g.cfg.Secrets.Get(n); ok && sec.MatchesHost(host) {
			out = append(out, n)
		}
	}
	return out
}

// startsTLS says whether the client's first byte is a TLS handshake
// record's: only TLS is terminated, and plain HTTP never gets a secret.
func startsTLS(c net.Conn, br *bufio.Reader) bool {
	c.SetReadDeadline(time.Now().Add(headerTimeout))
	defer c.SetReadDeadline(time.Time{})
	b, err := br.Peek(1)
	return err == nil && b[0] == 0x16
}

// bufConn is a connection whose first bytes were read into r.
type bufConn struct {
	*net.TCPConn
	r io.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// intercept serves a TLS connection of the task's to host, whose allowed
// upstream connection to to is up, with the task's secrets added.
func (s *binding) intercept(client *net.TCPConn, fromClient *bufio.Reader, up net.Conn, host string, to target, idx int) {
	if !s.track(up) {
		reset(client)
		reset(up)
		return
	}
	defer s.untrack(up)
	defer s.underway(idx, to, client, up)()
	fail := func(why string) {
		s.log.Cut(idx, why)
		reset(client)
		reset(up)
	}
	ca := s.g.caOf(s.addr)
	if ca == nil {
		fail("the container has no CA of its own to terminate TLS with")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), headerTimeout)
	defer cancel()
	// The host's side first: nothing is sent to a host whose certificate
	// does not verify.
	upTLS := tls.Client(up, &tls.Config{ServerName: host, RootCAs: s.g.cfg.UpstreamRoots,
		NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	if err := upTLS.HandshakeContext(ctx); err != nil {
		fail(fmt.Sprintf("%s's certificate did not verify, and no secret was sent: %v", host, err))
		return
	}
	cliTLS := tls.Server(&bufConn{TCPConn: client, r: fromClient}, &tls.Config{
		NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12,
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if hello.ServerName != "" && !strings.EqualFold(strings.TrimSuffix(hello.ServerName, "."), host) {
				return nil, fmt.Errorf("the TLS name %q is not %s, where the connection goes", hello.ServerName, host)
			}
			return ca.leaf(host)
		},
	})
	if err := cliTLS.HandshakeContext(ctx); err != nil {
		fail("the task's TLS handshake with the gateway failed: " + err.Error())
		return
	}
	s.serveHTTPS(client, cliTLS, upTLS, host, idx)
}

// serveHTTPS forwards the task's requests to host one by one, each read
// and written again (so the host reads the requests the gateway read, and
// no other), with the secrets added to those their rules name; the
// responses go back as they come, a secret in them masked.
func (s *binding) serveHTTPS(raw *net.TCPConn, client, up *tls.Conn, host string, idx int) {
	m := &masker{}
	var in int64
	// The responses' copy may still run when the requests' loop ends: it
	// says over a flag, not its error, that it met a cap.
	var inCapped atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		var err error
		in, err = s.copyMasked(client, up, m, idx)
		if err == nil {
			client.CloseWrite()
		}
		inCapped.Store(errors.Is(err, errCap))
		// No response can follow: a request the task still sends has
		// nowhere to go.
		raw.SetReadDeadline(time.Now())
	}()
	toUp := &countWriter{w: &capWriter{w: up, s: s, out: true}}
	br := bufio.NewReader(client)
	var outErr error
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			break
		}
		if why := misdirected(req, host); why != "" {
			outErr = errors.New(why)
			break
		}
		if err := checkRequest(req); err != nil {
			outErr = err
			break
		}
		if names, values := s.inject(req, host); len(names) > 0 {
			for _, v := range values {
				m.add(v)
			}
			// A compressed response would hide an echoed secret from
			// the mask.
			req.Header.Del("Accept-Encoding")
			s.log.Injected(idx, names)
		}
		upgrade := req.Header.Get("Upgrade") != ""
		if err := req.Write(toUp); err != nil {
			if errors.Is(err, errCap) {
				outErr = err
			}
			break
		}
		if upgrade {
			// A WebSocket carries no further requests.
			if _, err := io.Copy(toUp, br); errors.Is(err, errCap) {
				outErr = err
			}
			break
		}
	}
	switch {
	case errors.Is(outErr, errCap) || inCapped.Load():
		s.log.Cut(idx, s.overCaps())
		reset(raw)
		up.NetConn().Close()
	case outErr != nil:
		s.log.Cut(idx, outErr.Error())
		reset(raw)
		up.NetConn().Close()
	default:
		up.CloseWrite()
		<-done
		if inCapped.Load() {
			s.log.Cut(idx, s.overCaps())
			reset(raw)
		}
	}
	<-done
	client.NetConn().Close()
	up.NetConn().Close()
	s.log.Moved(idx, toUp.n, in)
}

// misdirected says why req may not go to host, the name the connection
// was allowed and verified for: one connection, one host.
func misdirected(req *http.Request, host string) string {
	named := req.Host
	if req.URL.Host != "" {
		named = req.URL.Host
	}
	if h, _, err := net.SplitHostPort(named); err == nil {
		named = h
	}
	if !strings.EqualFold(strings.TrimSuffix(named, "."), host) {
		return fmt.Sprintf("a request on the connection to %s named the host %q", host, named)
	}
	return ""
}

// inject adds to req, bound for host, the secrets whose rules name it, and
// returns their names and values.
func (s *binding) inject(req *http.Request, host string) (names, values []string) {
	for _, n := range s.pol().Secrets {
		sec, ok := s.g.cfg.Secrets.Get(n)
		if !ok || !sec.MatchesHost(host) || !pathMatches(sec, req) {
			continue
		}
		for h, v := range sec.HeaderValues() {
			req.Header.Set(h, v)
		}
		if sec.Query != "" {
			q := req.URL.Query()
			q.Set(sec.Query, sec.Value())
			req.URL.RawQuery = q.Encode()
		}
		names, values = append(names, n), append(values, sec.Value())
	}
	return names, values
}

// pathMatches says whether the secret's methods and paths name req: its
// path as sent and as the host may read it, dot segments resolved, must
// both begin with one of the paths.
func pathMatches(sec netpolicy.Secret, req *http.Request) bool {
	clean := path.Clean("/" + req.URL.Path)
	if strings.HasSuffix(req.URL.Path, "/") && clean != "/" {
		clean += "/"
	}
	return sec.Matches(req.Method, clean) && sec.Matches(req.Method, req.URL.EscapedPath())
}

// maskHold is how long the bytes that begin a secret wait for the rest of
// a response before they go masked.
const maskHold = 50 * time.Millisecond

// copyMasked copies the host's responses to the task, masking each secret
// added on the connection; it returns the bytes copied.
func (s *binding) copyMasked(dst, src *tls.Conn, m *masker, idx int) (int64, error) {
	w := &capWriter{w: dst, s: s, out: false}
	buf := make([]byte, 32<<10)
	var n int64
	for {
		if m.holding() {
			src.SetReadDeadline(time.Now().Add(maskHold))
		} else {
			src.SetReadDeadline(time.Time{})
		}
		k, err := src.Read(buf)
		out, masked := m.feed(buf[:k])
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = nil
			out = append(out, m.flush()...)
		} else if err != nil {
			out = append(out, m.flush()...)
		}
		s.log.Masked(idx, masked)
		if len(out) > 0 {
			if _, werr := w.Write(out); werr != nil {
				return n, werr
			}
			n += int64(len(out))
		}
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// minHeld is the shortest beginning of a secret held back at the end of
// what the host sent so far: fewer bytes give nothing away.
const minHeld = 4

// masker replaces each secret in a stream with as many '*': lengths, and
// so Content-Length and chunk sizes, stay right.
type masker struct {
	mu     sync.Mutex
	values [][]byte
	held   []byte // the end of the stream so far, which begins a secret
}

func (m *masker) add(v string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !slices.ContainsFunc(m.values, func(b []byte) bool { return string(b) == v }) {
		m.values = append(m.values, []byte(v))
	}
}

func (m *masker) holding() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.held) > 0
}

// feed takes p and returns what may go on, and how many secrets it
// masked.
func (m *masker) feed(p []byte) ([]byte, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	buf := append(m.held, p...)
	m.held = nil
	masked := 0
	for _, v := range m.values {
		for from := 0; ; {
			i := bytes.Index(buf[from:], v)
			if i < 0 {
				break
			}
			copy(buf[from+i:], bytes.Repeat([]byte{'*'}, len(v)))
			from += i + len(v)
			masked++
		}
	}
	hold := 0
	for _, v := range m.values {
		for k := min(len(v)-1, len(buf)); k >= minHeld && k > hold; k-- {
			if bytes.HasSuffix(buf, v[:k]) {
				hold = k
				break
			}
		}
	}
	if hold > 0 {
		m.held = bytes.Clone(buf[len(buf)-hold:])
	}
	return buf[:len(buf)-hold], masked
}

// flush returns the bytes held, masked: the stream paused or ended on the
// beginning of a secret.
func (m *masker) flush() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	held := m.held
	m.held = nil
	for i := range held {
		held[i] = '*'
	}
	return held
}

// countWriter counts what it writes.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
