package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/netpolicy"
)

// The secret of these tests, and the placeholder the program holds.
const (
	testSecret  = "sk-test-0123456789abcdef"
	placeholder = "SANDBOXD_SECRET_OPENAI"
)

// seen is what a test host received: each request's method, path,
// Authorization header and body.
type seen struct {
	mu   sync.Mutex
	reqs []string
}

func (s *seen) add(r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, fmt.Sprintf("%s %s auth=%q key=%q body=%q", r.Method, r.URL.Path, r.Header.Get("Authorization"), r.URL.Query().Get("key"), b))
}

func (s *seen) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.reqs...)
}

// secretRig is a rig whose gateway adds the secret "openai" to requests
// to api.test under /v1/, with the task's CA made, and two HTTPS test
// hosts with certificates of an upstream test CA: api.test (192.0.2.10)
// and other.test (192.0.2.11).
type secretRig struct {
	*rig
	api, other *seen
	// client trusts the task's CA and the upstream CA, as the program's
	// trust store does (the system's and the task's).
	client   *x509.CertPool
	upstream *x509.CertPool
}

func newSecretRig(t testing.TB, secrets ...netpolicy.Secret) *secretRig {
	t.Helper()
	if len(secrets) == 0 {
		secrets = []netpolicy.Secret{{Name: "openai", Env: "OPENAI_KEY", Hosts: []string{"api.test"}, Paths: []string{"/v1/"},
			Headers: map[string]string{"Authorization": "Bearer {secret}"}, ProgramEnv: "OPENAI_API_KEY"}}
	}
	b, err := jsonSecrets(secrets)
	if err != nil {
		t.Fatal(err)
	}
	list, err := netpolicy.ParseSecrets(b, func(string) string { return testSecret })
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, map[string]netip.Addr{"api.test": netip.MustParseAddr("192.0.2.10"), "other.test": netip.MustParseAddr("192.0.2.11")}, nil)
	upCA, err := newSandboxCA("upstream", netip.MustParseAddr("192.0.2.1"))
	if err != nil {
		t.Fatal(err)
	}
	sr := &secretRig{rig: r, api: &seen{}, other: &seen{}, upstream: x509.NewCertPool()}
	sr.upstream.AddCert(upCA.cert)
	r.g.cfg.Secrets = netpolicy.NewSecrets(list)
	r.g.cfg.UpstreamRoots = sr.upstream
	system := filepath.Join(t.TempDir(), "system.pem")
	os.WriteFile(system, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: upCA.cert.Raw}), 0o644)
	r.g.cfg.SystemBundle = system
	if err := r.g.makeCA(bound); err != nil {
		t.Fatal(err)
	}
	bundle, err := os.ReadFile(r.g.TrustBundle(bound))
	if err != nil {
		t.Fatal(err)
	}
	sr.client = x509.NewCertPool()
	if !sr.client.AppendCertsFromPEM(bundle) {
		t.Fatal("the trust store holds no certificate")
	}
	for _, h := range []struct {
		name, addr string
		seen       *seen
	}{{"api.test", "192.0.2.10:443", sr.api}, {"other.test", "192.0.2.11:443", sr.other}} {
		cert, err := upCA.leaf(h.name)
		if err != nil {
			t.Fatal(err)
		}
		sr.tlsHost(h.addr, cert, h.seen)
	}
	return sr
}

func jsonSecrets(list []netpolicy.Secret) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"secrets": [`)
	for i, s := range list {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"name": %q, "env": %q, "hosts": [%q]`, s.Name, s.Env, s.Hosts[0])
		if len(s.Paths) > 0 {
			fmt.Fprintf(&b, `, "paths": [%q]`, s.Paths[0])
		}
		if len(s.Headers) > 0 {
			b.WriteString(`, "headers": {`)
			first := true
			for k, v := range s.Headers {
				if !first {
					b.WriteString(",")
				}
				first = false
				fmt.Fprintf(&b, "%q: %q", k, v)
			}
			b.WriteString("}")
		}
		if s.Query != "" {
			fmt.Fprintf(&b, `, "query": %q`, s.Query)
		}
		if s.ProgramEnv != "" {
			fmt.Fprintf(&b, `, "program_env": %q`, s.ProgramEnv)
		}
		b.WriteString("}")
	}
	b.WriteString("]}")
	return b.Bytes(), nil
}

// tlsHost serves HTTPS with cert at addr: /v1/echo answers with the
// Authorization header it got, /v1/redirect sends the client to
// other.test, anything else "ok".
func (sr *secretRig) tlsHost(addr string, cert *tls.Certificate, s *seen) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/echo":
			s.add(r)
			fmt.Fprintf(w, "you sent %s", r.Header.Get("Authorization"))
		case "/v1/redirect":
			s.add(r)
			http.Redirect(w, r, "https://other.test/v1/landed", http.StatusFound)
		default:
			s.add(r)
			io.WriteString(w, "ok")
		}
	})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	sr.host(addr, func(c net.Conn) {
		tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{*cert}})
		l := &oneConn{c: tc, done: make(chan struct{})}
		go srv.Serve(l)
		<-l.done
	})
	sr.t.Cleanup(func() { srv.Close() })
}

// oneConn is a listener of one connection, done when it closes.
type oneConn struct {
	mu   sync.Mutex
	c    net.Conn
	done chan struct{}
}

func (l *oneConn) Accept() (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.c == nil {
		<-l.done
		return nil, net.ErrClosed
	}
	c := l.c
	l.c = nil
	return &closeNotify{Conn: c, done: l.done}, nil
}
func (l *oneConn) Close() error   { return nil }
func (l *oneConn) Addr() net.Addr { return &net.TCPAddr{} }

type closeNotify struct {
	net.Conn
	once sync.Once
	done chan struct{}
}

func (c *closeNotify) Close() error {
	c.once.Do(func() { close(c.done) })
	return c.Conn.Close()
}

// httpClient is the program's HTTP client: through the gateway's proxy,
// trusting what the container trusts.
func (sr *secretRig) httpClient() *http.Client {
	proxy := &url.URL{Scheme: "http", Host: sr.listen(sr.g.serveProxy)}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy:           http.ProxyURL(proxy),
		TLSClientConfig: &tls.Config{RootCAs: sr.client},
	}}
}

func getWithPlaceholder(t testing.TB, c *http.Client, u string) (string, *http.Response) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set("Authorization", "Bearer "+placeholder)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b), resp
}

// TestSecretGoesToTheNamedHostOnly: the program sends its placeholder; the
// gateway's TLS to api.test carries the secret on /v1/ requests and on no
// other path, a response that echoes it reaches the program masked, a
// redirect to another host does not carry it, and other.test's connection
// is spliced: its certificate is the host's own.
func TestSecretGoesToTheNamedHostOnly(t *testing.T) {
	sr := newSecretRig(t)
	b := sr.bind(netpolicy.Caps{}, "api.test:443", "other.test:443")
	withSecrets(t, b, "openai")
	c := sr.httpClient()

	if got, _ := getWithPlaceholder(t, c, "https://api.test/v1/models"); got != "ok" {
		t.Fatalf("GET /v1/models: %q", got)
	}
	echoed, resp := getWithPlaceholder(t, c, "https://api.test/v1/echo")
	if strings.Contains(echoed, testSecret) || echoed != "you sent Bearer "+strings.Repeat("*", len(testSecret)) {
		t.Errorf("the echo reached the program as %q", echoed)
	}
	if resp.TLS == nil || resp.TLS.PeerCertificates[0].Issuer.CommonName != "sandboxd unit egress CA for 127.0.0.1" {
		t.Errorf("api.test's certificate to the program is not the task CA's: %+v", resp.TLS)
	}
	getWithPlaceholder(t, c, "https://api.test/elsewhere")
	landed, _ := getWithPlaceholder(t, c, "https://api.test/v1/redirect")
	if landed != "ok" {
		t.Errorf("the redirect landed on %q", landed)
	}
	_, resp = getWithPlaceholder(t, c, "https://other.test/v1/direct")
	if issuer := resp.TLS.PeerCertificates[0].Issuer.CommonName; issuer != "sandboxd upstream egress CA for 192.0.2.1" {
		t.Errorf("other.test's certificate was issued by %q: not spliced", issuer)
	}
	c.CloseIdleConnections()

	withSecret := fmt.Sprintf("auth=%q", "Bearer "+testSecret)
	withPlaceholder := fmt.Sprintf("auth=%q", "Bearer "+placeholder)
	api := sr.api.all()
	want := []string{"GET /v1/models " + withSecret, "GET /v1/echo " + withSecret, "GET /elsewhere " + withPlaceholder, "GET /v1/redirect " + withSecret}
	if len(api) != len(want) {
		t.Fatalf("api.test got %q", api)
	}
	for i := range want {
		if !strings.HasPrefix(api[i], want[i]) {
			t.Errorf("api.test's request %d: %q, want %q", i, api[i], want[i])
		}
	}
	for _, r := range sr.other.all() {
		if strings.Contains(r, testSecret) {
			t.Errorf("other.test got the secret: %q", r)
		}
	}
	if n := len(sr.other.all()); n != 2 {
		t.Errorf("other.test got %d requests, want the redirect's and the direct one", n)
	}
	sum := waitEnded(t, b, 2)
	injections, masked := 0, 0
	for _, ev := range sum.Events {
		if strings.Contains(fmt.Sprint(ev), testSecret) {
			t.Errorf("the log holds the secret: %+v", ev)
		}
		switch ev.Name {
		case "api.test":
			if len(ev.Secrets) != 1 || ev.Secrets[0] != "openai" {
				t.Errorf("api.test's event: %+v", ev)
			}
			injections, masked = injections+ev.Injections, masked+ev.Masked
		case "other.test":
			if len(ev.Secrets) != 0 || ev.Injections != 0 {
				t.Errorf("other.test's event: %+v", ev)
			}
		}
	}
	if injections != 3 || masked != 1 {
		t.Errorf("api.test's requests: %d injected, %d masked; want 3 and 1: %+v", injections, masked, sum.Events)
	}
}

// waitEnded ends b once n connections have recorded their bytes.
func waitEnded(t *testing.T, b netpolicy.Binding, n int) netpolicy.Summary {
	t.Helper()
	s := b.(*binding)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ended := 0
		for _, ev := range s.log.Summary().Events {
			if ev.BytesIn > 0 {
				ended++
			}
		}
		if ended >= n {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return b.End()
}

// rawTLS opens the program's TLS connection to host through a CONNECT.
func (sr *secretRig) rawTLS(host string) (*tls.Conn, *bufio.Reader) {
	sr.t.Helper()
	c, resp := connect(sr.t, sr.listen(sr.g.serveProxy), host+":443")
	if resp.StatusCode != http.StatusOK {
		sr.t.Fatalf("CONNECT %s: %s", host, resp.Status)
	}
	tc := tls.Client(c, &tls.Config{RootCAs: sr.client, ServerName: host})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		sr.t.Fatal(err)
	}
	return tc, bufio.NewReader(tc)
}

// TestRequestsAreReadAndWrittenAgain: what the host reads is what the
// gateway read, request by request: a request hidden in a body stays a
// body, a request for a path the secret does not name gets no secret
// though an earlier one on the connection did, and a request naming
// another host cuts the connection before it is sent.
func TestRequestsAreReadAndWrittenAgain(t *testing.T) {
	sr := newSecretRig(t)
	b := sr.bind(netpolicy.Caps{}, "api.test:443", "other.test:443")
	withSecrets(t, b, "openai")
	tc, br := sr.rawTLS("api.test")
	hidden := "GET /v1/models HTTP/1.1\r\nHost: api.test\r\n\r\n"
	fmt.Fprintf(tc, "POST /v1/chat HTTP/1.1\r\nHost: api.test\r\nContent-Length: %d\r\n\r\n%s", len(hidden), hidden)
	fmt.Fprintf(tc, "GET /admin HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n\r\n", placeholder)
	for range 2 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
	}
	fmt.Fprintf(tc, "GET /v1/models HTTP/1.1\r\nHost: other.test\r\n\r\n")
	if _, err := http.ReadResponse(br, nil); err == nil {
		t.Error("a request for other.test on api.test's connection was answered")
	}
	api := sr.api.all()
	if len(api) != 2 || !strings.HasPrefix(api[0], "POST /v1/chat auth=\"Bearer "+testSecret+"\"") || !strings.Contains(api[0], "body=\"GET /v1/models") ||
		api[1] != fmt.Sprintf("GET /admin auth=%q key=\"\" body=\"\"", "Bearer "+placeholder) {
		t.Errorf("api.test got %q", api)
	}
	if n := len(sr.other.all()); n != 0 {
		t.Errorf("other.test got %d requests", n)
	}
	sum := b.End()
	if ev := only(t, sum); ev.Injections != 1 || !strings.Contains(ev.Reason, `named the host "other.test"`) {
		t.Errorf("event %+v", ev)
	}
}

// TestQueryParameterAndPaths: a secret set as a query parameter, only on
// the paths it names, with dot segments resolved before the match.
func TestQueryParameterAndPaths(t *testing.T) {
	sr := newSecretRig(t, netpolicy.Secret{Name: "maps", Env: "K", Hosts: []string{"api.test"}, Paths: []string{"/v1/"}, Query: "key"})
	b := sr.bind(netpolicy.Caps{}, "api.test:443")
	withSecrets(t, b, "maps")
	tc, br := sr.rawTLS("api.test")
	for _, p := range []string{"/v1/geo?q=1", "/v1/../admin", "/v1/%2e%2e/admin"} {
		fmt.Fprintf(tc, "GET %s HTTP/1.1\r\nHost: api.test\r\n\r\n", p)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
	}
	api := sr.api.all()
	if len(api) != 3 || !strings.Contains(api[0], fmt.Sprintf("key=%q", testSecret)) || strings.Contains(api[1], testSecret) || strings.Contains(api[2], testSecret) {
		t.Errorf("api.test got %q", api)
	}
	b.End()
}

// TestAHostThatDoesNotVerifyGetsNothing: a host whose certificate the
// gateway cannot verify is sent nothing, and the program's connection is
// cut with the reason in the log.
func TestAHostThatDoesNotVerifyGetsNothing(t *testing.T) {
	sr := newSecretRig(t)
	sr.g.cfg.UpstreamRoots = x509.NewCertPool()
	b := sr.bind(netpolicy.Caps{}, "api.test:443")
	withSecrets(t, b, "openai")
	c, resp := connect(t, sr.listen(sr.g.serveProxy), "api.test:443")
	if resp.StatusCode != http.StatusOK {
		t.Fatal(resp.Status)
	}
	tc := tls.Client(c, &tls.Config{RootCAs: sr.client, ServerName: "api.test"})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Error("the program's handshake succeeded with a host the gateway could not verify")
	}
	if n := len(sr.api.all()); n != 0 {
		t.Errorf("api.test got %d requests", n)
	}
	if ev := only(t, b.End()); !strings.Contains(ev.Reason, "did not verify, and no secret was sent") {
		t.Errorf("event %+v", ev)
	}
}

// TestTransparentTLSGetsTheSecret: a program that ignores the proxy and
// dials api.test's address gets the secret added too, by its TLS name.
func TestTransparentTLSGetsTheSecret(t *testing.T) {
	sr := newSecretRig(t)
	b := sr.bind(netpolicy.Caps{}, "api.test:443")
	withSecrets(t, b, "openai")
	c := sr.redirected("192.0.2.10:443")
	tc := tls.Client(c, &tls.Config{RootCAs: sr.client, ServerName: "api.test"})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(tc, "GET /v1/models HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	if api := sr.api.all(); len(api) != 1 || !strings.Contains(api[0], testSecret) {
		t.Errorf("api.test got %q", api)
	}
	if ev := waitEnded(t, b, 1).Events[0]; ev.Via != "sni" || ev.Injections != 1 {
		t.Errorf("event %+v", ev)
	}
}

// TestNoSecretWithoutTheRequest: a task that did not ask for the secret
// is spliced to api.test, and sees the host's own certificate.
func TestNoSecretWithoutTheRequest(t *testing.T) {
	sr := newSecretRig(t)
	b := sr.bind(netpolicy.Caps{}, "api.test:443")
	_, resp := getWithPlaceholder(t, sr.httpClient(), "https://api.test/v1/models")
	if issuer := resp.TLS.PeerCertificates[0].Issuer.CommonName; issuer != "sandboxd upstream egress CA for 192.0.2.1" {
		t.Errorf("api.test's certificate was issued by %q: not spliced", issuer)
	}
	if api := sr.api.all(); len(api) != 1 || strings.Contains(api[0], testSecret) {
		t.Errorf("api.test got %q", api)
	}
	b.End()
}

// TestTrustStoreHoldsNoKey: the container's trust store is the system's
// certificates and its CA's, no key; Free removes it.
func TestTrustStoreHoldsNoKey(t *testing.T) {
	sr := newSecretRig(t)
	path := sr.g.TrustBundle(bound)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for rest := b; ; {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			break
		}
		blocks = append(blocks, blk.Type)
	}
	if len(blocks) != 2 || blocks[0] != "CERTIFICATE" || blocks[1] != "CERTIFICATE" || bytes.Contains(b, []byte("PRIVATE")) {
		t.Errorf("the trust store holds %q", blocks)
	}
	if err := sr.g.dropCA(bound); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) || sr.g.TrustBundle(bound) != "" {
		t.Errorf("the trust store is left: %v", err)
	}
	if vars := sr.g.Placeholders([]string{"openai"}); vars[placeholder] != placeholder || vars["OPENAI_API_KEY"] != placeholder || len(vars) != 2 {
		t.Errorf("placeholders %v", vars)
	}
}

// TestMaskerAcrossReads: a secret split between reads is masked whole, a
// stream that pauses on its beginning gets that beginning masked, and
// lengths never change.
func TestMaskerAcrossReads(t *testing.T) {
	m := &masker{}
	m.add(testSecret)
	var out []byte
	total := 0
	for _, part := range []string{"a: sk-te", "st-0123", "456789abcdef and sk-", "x"} {
		got, n := m.feed([]byte(part))
		out, total = append(out, got...), total+n
	}
	out = append(out, m.flush()...)
	want := "a: " + strings.Repeat("*", len(testSecret)) + " and sk-x"
	if string(out) != want || total != 1 {
		t.Errorf("masked %q (%d), want %q", out, total, want)
	}
	got, _ := m.feed([]byte("ends on sk-test-01"))
	got = append(got, m.flush()...)
	if string(got) != "ends on "+strings.Repeat("*", len("sk-test-01")) {
		t.Errorf("a pause on the secret's beginning gave %q", got)
	}
}

// BenchmarkRequest is what a secret costs a request through the proxy:
// spliced (the host's own TLS end to end) or with the secret added (two
// TLS connections, each request read and written again), on a kept-alive
// connection and on a new connection each.
func BenchmarkRequest(b *testing.B) {
	for _, bc := range []struct {
		name      string
		secret    bool
		keepAlive bool
	}{{"spliced/kept-alive", false, true}, {"injected/kept-alive", true, true}, {"spliced/new-connection", false, false}, {"injected/new-connection", true, false}} {
		b.Run(bc.name, func(b *testing.B) {
			sr := newSecretRig(b)
			bd := sr.bind(netpolicy.Caps{Connections: 1 << 30, BytesOut: 1 << 40, BytesIn: 1 << 40}, "api.test:443")
			if bc.secret {
				withSecrets(b, bd, "openai")
			}
			c := sr.httpClient()
			c.Transport.(*http.Transport).DisableKeepAlives = !bc.keepAlive
			getWithPlaceholder(b, c, "https://api.test/v1/models")
			b.ResetTimer()
			for range b.N {
				resp, err := c.Get("https://api.test/v1/models")
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			b.StopTimer()
			c.CloseIdleConnections()
			bd.End()
		})
	}
}

// withSecrets adds the secrets names to b's policy.
func withSecrets(t testing.TB, b netpolicy.Binding, names ...string) {
	t.Helper()
	p := b.(*binding).pol()
	p.Secrets = names
	if err := b.(*binding).Update(p); err != nil {
		t.Fatal(err)
	}
}
