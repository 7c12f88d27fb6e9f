package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/netpolicy"
)

// These tests drive the gateway's decisions, proxies, DNS stub and caps
// in the test's own process, without a namespace or root: the task is a
// client on loopback, bound at 127.0.0.1, and every address a policy
// allows is a documentation address (192.0.2.0/24, 198.51.100.0/24) that
// the gateway's dialler maps to a loopback server of the test. No packet
// leaves the host; a dial to an address the test did not map fails it.
// The same paths through real namespaces and nftables are
// gateway_integration_test.go's.

// bound is where the test's task is bound: the peer address of every
// connection it makes.
var bound = netip.MustParseAddr("127.0.0.1")

// rig is a gateway and the test hosts behind it.
type rig struct {
	t     testing.TB
	g     *Gateway
	rules *recordedRules

	mu    sync.Mutex
	hosts map[string]string // allowed address:port -> loopback server
	dials []string
}

// recordedRules stand for the nftables set: which (address, port) pairs
// reach the transparent proxy.
type recordedRules struct {
	mu      sync.Mutex
	allowed map[netip.AddrPort]bool
}

func (r *recordedRules) allow(a netip.Addr, ports []uint16) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range ports {
		r.allowed[netip.AddrPortFrom(a, p)] = true
	}
	return nil
}

func (r *recordedRules) forget(a netip.Addr, ports []uint16) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range ports {
		delete(r.allowed, netip.AddrPortFrom(a, p))
	}
	return nil
}

func (r *recordedRules) close() {}

func (r *recordedRules) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.allowed)
}

// resolver answers from a table: a name it lacks does not exist.
type resolver map[string][]netip.Addr

func (r resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if addrs, ok := r[host]; ok {
		return addrs, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func newRig(t testing.TB, hosts map[string]netip.Addr, names resolver) *rig {
	t.Helper()
	o := netpolicy.DefaultOperator()
	o.Hosts = hosts
	g, err := newGateway(Config{Instance: "unit", RunDir: t.TempDir(), Operator: o, Resolver: names, Log: testutil.Logger(t, 0)})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, g: g, rules: &recordedRules{allowed: map[netip.AddrPort]bool{}}, hosts: map[string]string{}}
	g.rules = r.rules
	g.dial = func(ctx context.Context, network, address string) (net.Conn, error) {
		r.mu.Lock()
		r.dials = append(r.dials, address)
		to, ok := r.hosts[address]
		r.mu.Unlock()
		if !ok {
			t.Errorf("the gateway dialled %s, which is no test host", address)
			return nil, errors.New("not a test host")
		}
		var d net.Dialer
		return d.DialContext(ctx, network, to)
	}
	t.Cleanup(func() {
		for _, l := range g.listeners {
			l.Close()
		}
		g.mu.Lock()
		for _, s := range g.bindings {
			s.closeConns()
		}
		g.mu.Unlock()
		g.wg.Wait()
	})
	return r
}

// host serves h at addr (an allowed address:port), on loopback.
func (r *rig) host(addr string, serve func(net.Conn)) {
	r.t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	r.mu.Lock()
	r.hosts[addr] = l.Addr().String()
	r.mu.Unlock()
}

// httpHost serves h as HTTP at addr.
func (r *rig) httpHost(addr string, h http.Handler) {
	r.t.Helper()
	srv := httptest.NewServer(h)
	r.t.Cleanup(srv.Close)
	r.mu.Lock()
	r.hosts[addr] = srv.Listener.Addr().String()
	r.mu.Unlock()
}

func (r *rig) dialled() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.dials)
}

// bind binds the task at 127.0.0.1 to a policy of rules.
func (r *rig) bind(caps netpolicy.Caps, rules ...string) netpolicy.Binding {
	r.t.Helper()
	p := netpolicy.Policy{Mode: netpolicy.AllowList, Caps: caps}
	for _, s := range rules {
		rule, err := netpolicy.ParseRule(s)
		if err != nil {
			r.t.Fatal(err)
		}
		p.Rules = append(p.Rules, rule)
	}
	b, err := r.g.Bind(bound, p)
	if err != nil {
		r.t.Fatal(err)
	}
	return b
}

// listen serves the gateway's handler on a loopback port, as its
// namespace's listeners serve it, and returns the port's address.
func (r *rig) listen(serve func(*binding, *net.TCPConn)) string {
	r.t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		r.t.Fatal(err)
	}
	r.g.listeners = append(r.g.listeners, l)
	r.g.accept(l, serve)
	return l.Addr().String()
}

// redirected serves one connection of the task as the transparent proxy
// serves one the rules sent it, going to dst, and returns the task's end.
func (r *rig) redirected(dst string) net.Conn {
	r.t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		r.t.Fatal(err)
	}
	defer l.Close()
	client, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { client.Close() })
	c, err := l.Accept()
	if err != nil {
		r.t.Fatal(err)
	}
	s := r.g.bindingOf(c.RemoteAddr())
	if s == nil || !s.track(c) {
		r.t.Fatal("the task is not bound")
	}
	r.g.wg.Add(1)
	go func() {
		defer r.g.wg.Done()
		defer s.untrack(c)
		r.g.transparent(s, c.(*net.TCPConn), netip.MustParseAddrPort(dst))
	}()
	return client
}

// echo writes back what it reads.
func echo(c net.Conn) { io.Copy(c, c) }

// connect asks the proxy at proxy for a tunnel to hostport and returns
// the connection and the proxy's response.
func connect(t testing.TB, proxy, hostport string) (net.Conn, *http.Response) {
	t.Helper()
	c, err := net.Dial("tcp4", proxy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", hostport, hostport)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusOK && br.Buffered() > 0 {
		t.Fatalf("the proxy sent %d bytes past its response", br.Buffered())
	}
	return c, resp
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// roundTrip writes msg and reads as many bytes back.
func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
		t.Fatalf("read back %q, %v; want %q", got, err, msg)
	}
}

// closedByGateway says whether c ends (EOF or reset) without data.
func closedByGateway(t *testing.T, c net.Conn) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := c.Read(make([]byte, 1))
	var ne net.Error
	return n == 0 && err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// only returns the single event of the task's log, failing otherwise.
func only(t *testing.T, sum netpolicy.Summary) netpolicy.Event {
	t.Helper()
	if len(sum.Events) != 1 {
		t.Fatalf("events %+v, want one", sum.Events)
	}
	return sum.Events[0]
}

func TestProxyTunnelsToAnAllowedName(t *testing.T) {
	r := newRig(t, map[string]netip.Addr{"api.test": netip.MustParseAddr("192.0.2.10")}, nil)
	r.host("192.0.2.10:443", echo)
	b := r.bind(netpolicy.Caps{}, "api.test:443")
	if got := r.rules.count(); got != 1 {
		t.Errorf("Bind let %d (address, port) pairs through the rules, want 1", got)
	}
	c, resp := connect(t, r.listen(r.g.serveProxy), "api.test:443")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	roundTrip(t, c, "ping")
	c.Close()
	r.waitMoved(b, 4)
	sum := b.End()
	ev := only(t, sum)
	if !ev.Allowed || ev.Name != "api.test" || ev.Via != "connect" || ev.Addr != "192.0.2.10" || ev.Port != 443 || ev.Rule != "api.test:443" {
		t.Errorf("event %+v", ev)
	}
	if ev.BytesOut != 4 || ev.BytesIn != 4 || sum.BytesOut != 4 || sum.BytesIn != 4 || sum.Connections != 1 || sum.Denied != 0 {
		t.Errorf("summary %+v", sum)
	}
	if got := r.rules.count(); got != 0 {
		t.Errorf("End left %d pairs in the rules", got)
	}
	if n := promtest.ToFloat64(r.g.decisions.WithLabelValues("connect", "allowed")); n != 1 {
		t.Errorf("allowed connections counted: %v", n)
	}
}

// waitMoved waits until the relay has recorded n bytes each way: the log
// takes a connection's bytes when both its directions have ended.
func (r *rig) waitMoved(b netpolicy.Binding, n int64) {
	r.t.Helper()
	s := b.(*binding)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if sum := s.log.Summary(); sum.BytesOut >= n && sum.BytesIn >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.t.Fatalf("the relay did not record %d bytes each way: %+v", n, s.log.Summary())
}

func TestProxyRefusals(t *testing.T) {
	r := newRig(t, map[string]netip.Addr{"api.test": netip.MustParseAddr("192.0.2.10")}, resolver{
		"rebound.test": {netip.MustParseAddr("127.0.0.1")},
		"inside.test":  {netip.MustParseAddr("10.0.0.5")},
	})
	r.bind(netpolicy.Caps{}, "api.test:443", "rebound.test:443", "inside.test:443", "198.51.100.0/24:443")
	proxy := r.listen(r.g.serveProxy)
	for _, tt := range []struct {
		target, reason string
		status         int
	}{
		{"evil.test:443", "no rule allows evil.test on port 443", http.StatusForbidden},
		{"api.test:80", "no rule allows api.test on port 80", http.StatusForbidden},
		{"rebound.test:443", "127.0.0.1 is loopback", http.StatusForbidden},
		{"inside.test:443", "inside.test resolves to 10.0.0.5, in a private range no rule names", http.StatusForbidden},
		{"198.51.99.7:443", "no rule allows 198.51.99.7 on port 443", http.StatusForbidden},
		{"169.254.169.254:443", "169.254.169.254 is link-local", http.StatusForbidden},
		{"gone.test:443", "no rule allows gone.test", http.StatusForbidden},
		{"nohost", "is not HOST:PORT", http.StatusBadRequest},
		{"api.test:0", "is not a port", http.StatusBadRequest},
	} {
		_, resp := connect(t, proxy, tt.target)
		if got := body(t, resp); resp.StatusCode != tt.status || !strings.Contains(got, tt.reason) {
			t.Errorf("CONNECT %s: %s %q; want %d and %q", tt.target, resp.Status, got, tt.status, tt.reason)
		}
	}
	if d := r.dialled(); len(d) > 0 {
		t.Errorf("refused targets were dialled: %v", d)
	}
}

func TestProxyForwardsOneRequestOfAbsoluteURL(t *testing.T) {
	r := newRig(t, map[string]netip.Addr{"api.test": netip.MustParseAddr("192.0.2.10")}, nil)
	seen := make(chan *http.Request, 4)
	r.httpHost("192.0.2.10:80", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		seen <- req
		io.WriteString(w, "hello from api.test")
	}))
	b := r.bind(netpolicy.Caps{}, "api.test:80")
	c, err := net.Dial("tcp4", r.listen(r.g.serveProxy))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Two pipelined requests: only the first is forwarded, and the
	// connection ends after its response.
	io.WriteString(c, "GET http://api.test/v1/models?x=1 HTTP/1.1\r\nHost: api.test\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic eDp5\r\n\r\n"+
		"GET http://api.test/second HTTP/1.1\r\nHost: api.test\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := body(t, resp); resp.StatusCode != http.StatusOK || got != "hello from api.test" {
		t.Fatalf("%s %q", resp.Status, got)
	}
	req := <-seen
	if req.RequestURI != "/v1/models?x=1" || req.Header.Get("Proxy-Authorization") != "" || req.Header.Get("Proxy-Connection") != "" || !req.Close {
		t.Errorf("forwarded %s with header %v (close %v)", req.RequestURI, req.Header, req.Close)
	}
	if _, err := http.ReadResponse(br, nil); err == nil {
		t.Error("a second response came on the same connection")
	}
	select {
	case req := <-seen:
		t.Errorf("the pipelined request %s was forwarded", req.RequestURI)
	default:
	}
	c.Close()
	r.waitMoved(b, 1)
	if ev := only(t, b.End()); !ev.Allowed || ev.Via != "http" || ev.Name != "api.test" || ev.Port != 80 {
		t.Errorf("event %+v", ev)
	}
}

func TestProxyRefusesWhatItCannotCheck(t *testing.T) {
	r := newRig(t, map[string]netip.Addr{"api.test": netip.MustParseAddr("192.0.2.10")}, nil)
	b := r.bind(netpolicy.Caps{}, "api.test:80")
	proxy := r.listen(r.g.serveProxy)
	for _, tt := range []struct {
		request, reason string
		status          int
	}{
		{"GET /relative HTTP/1.1\r\nHost: api.test\r\n\r\n", "the proxy takes CONNECT, or an absolute http:// URL", http.StatusBadRequest},
		{"GET https://api.test/ HTTP/1.1\r\nHost: api.test\r\n\r\n", "the proxy takes CONNECT", http.StatusBadRequest},
		{"GET http://api.test/ HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n", "HTTP/2 in cleartext (h2c) is not allowed", http.StatusForbidden},
	} {
		c, err := net.Dial("tcp4", proxy)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, tt.request)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := body(t, resp); resp.StatusCode != tt.status || !strings.Contains(got, tt.reason) {
			t.Errorf("%q: %s %q; want %d and %q", tt.request, resp.Status, got, tt.status, tt.reason)
		}
		c.Close()
	}
	// Not HTTP, or a request Go's parser refuses: the connection is
	// reset, nothing dialled.
	for _, request := range []string{"\x00\x01garbage\r\n\r\n", "CONNECT api.test:https HTTP/1.1\r\nHost: api.test:https\r\n\r\n"} {
		c, err := net.Dial("tcp4", proxy)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, request)
		if !closedByGateway(t, c) {
			t.Errorf("%q: the connection was kept", request)
		}
		c.Close()
	}
	if d := r.dialled(); len(d) > 0 {
		t.Errorf("dialled %v", d)
	}
	sum := b.End()
	if sum.Denied != 1 || sum.Events[0].Reason != errH2C.Error() {
		t.Errorf("the h2c upgrade is not the one refusal recorded: %+v", sum)
	}
}

// TestProxyAllowsAnAddressByRange: a bare address goes where the task
// asked only under a CIDR rule, and a private one only under a rule that
// names its range.
func TestProxyAllowsAnAddressByRange(t *testing.T) {
	r := newRig(t, nil, nil)
	r.host("198.51.100.7:443", echo)
	r.host("10.1.2.3:5432", echo)
	b := r.bind(netpolicy.Caps{}, "198.51.100.0/24:443", "10.1.0.0/16:5432", "0.0.0.0/0:6379")
	proxy := r.listen(r.g.serveProxy)
	for _, target := range []string{"198.51.100.7:443", "10.1.2.3:5432"} {
		c, resp := connect(t, proxy, target)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT %s: %s", target, resp.Status)
		}
		roundTrip(t, c, "x")
	}
	_, resp := connect(t, proxy, "10.9.9.9:6379")
	if got := body(t, resp); resp.StatusCode != http.StatusForbidden || !strings.Contains(got, "10.9.9.9 is in a private range, which 0.0.0.0/0:6379 does not name") {
		t.Errorf("a private address under 0.0.0.0/0: %s %q", resp.Status, got)
	}
	sum := b.End()
	if sum.Connections != 3 || sum.Denied != 1 || sum.Events[0].Via != "address" || sum.Events[0].Rule != "198.51.100.0/24:443" {
		t.Errorf("summary %+v", sum)
	}
}

// testTLSHost is a TLS server for name with a certificate of a test CA,
// and a client configuration that trusts only that CA.
func testTLSHost(t *testing.T, name string) (*tls.Config, *tls.Config) {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	srv.StartTLS()
	cert := srv.TLS.Certificates[0]
	srv.Close()
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	// httptest's certificate names example.com: the client checks that
	// name, while the ClientHello carries the task's.
	client := &tls.Config{RootCAs: pool, ServerName: name, InsecureSkipVerify: true, VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
		c, err := x509.ParseCertificate(raw[0])
		if err != nil {
			return err
		}
		_, err = c.Verify(x509.VerifyOptions{Roots: pool, DNSName: "example.com"})
		return err
	}}
	return &tls.Config{Certificates: []tls.Certificate{cert}}, client
}

// TestTransparentTakesTheNameOfTLSAndHTTP: a redirected connection is
// decided by its TLS server name or HTTP Host, and goes to the address
// the task dialled only if the name resolves there.
func TestTransparentTakesTheNameOfTLSAndHTTP(t *testing.T) {
	r := newRig(t, map[string]netip.Addr{"api.test": netip.MustParseAddr("192.0.2.10")}, nil)
	serverTLS, clientTLS := testTLSHost(t, "api.test")
	r.host("192.0.2.10:443", func(c net.Conn) {
		tc := tls.Server(c, serverTLS)
		if tc.Handshake() == nil {
			echo(tc)
		}
	})
	r.httpHost("192.0.2.10:80", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		fmt.Fprintf(w, "host %s", req.Host)
	}))
	b := r.bind(netpolicy.Caps{}, "api.test:80,443")

	tc := tls.Client(r.redirected("192.0.2.10:443"), clientTLS)
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS through the transparent proxy: %v", err)
	}
	roundTrip(t, tc, "secret-free bytes")
	tc.Close()

	c := r.redirected("192.0.2.10:80")
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: api.test\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := body(t, resp); got != "host api.test" {
		t.Errorf("the test host answered %q", got)
	}

	// The name is allowed, the address it goes to is not the name's.
	tc = tls.Client(r.redirected("192.0.2.99:443"), clientTLS)
	if err := tc.Handshake(); err == nil {
		t.Error("a TLS connection naming api.test went to 192.0.2.99")
	}
	c = r.redirected("192.0.2.99:80")
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: api.test\r\n\r\n")
	resp, err = http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := body(t, resp); resp.StatusCode != http.StatusForbidden || !strings.Contains(got, "the connection to 192.0.2.99 names api.test, which resolves to 192.0.2.10") {
		t.Errorf("a Host naming another address: %s %q", resp.Status, got)
	}
	// h2c by prior knowledge names a host per stream: refused.
	c = r.redirected("192.0.2.10:80")
	io.WriteString(c, h2Preface)
	if !closedByGateway(t, c) {
		t.Error("HTTP/2 by prior knowledge went through")
	}
	r.waitMoved(b, 1)
	sum := b.End()
	var vias []string
	for _, ev := range sum.Events {
		vias = append(vias, fmt.Sprintf("%s/%v", ev.Via, ev.Allowed))
	}
	if want := []string{"sni/true", "host/true", "sni/false", "host/false", "h2c/false"}; !slices.Equal(vias, want) {
		t.Errorf("decisions %v, want %v", vias, want)
	}
	if d := r.dialled(); !slices.Equal(d, []string{"192.0.2.10:443", "192.0.2.10:80"}) {
		t.Errorf("dialled %v", d)
	}
}

// TestRawTCPByName: a protocol whose server speaks first carries no name;
// the connection is the name's when the gateway's DNS answered the task
// that address for it, and refused otherwise.
func TestRawTCPByName(t *testing.T) {
	r := newRig(t, nil, resolver{"db.test": {netip.MustParseAddr("192.0.2.20")}})
	r.host("192.0.2.20:5432", func(c net.Conn) {
		io.WriteString(c, "banner\n")
		echo(c)
	})
	b := r.bind(netpolicy.Caps{}, "db.test:5432")
	dnsAddr := r.serveDNS()
	if addrs := lookup(t, dnsAddr, "db.test", dns.TypeA); !slices.Equal(addrs, []string{"192.0.2.20"}) {
		t.Fatalf("the stub answered db.test with %v", addrs)
	}
	c := r.redirected("192.0.2.20:5432")
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if line, err := br.ReadString('\n'); err != nil || line != "banner\n" {
		t.Fatalf("the server's banner: %q, %v", line, err)
	}
	roundTrip(t, c, "query")
	// An address the task did not get by name (nor may: no rule names
	// other.test) is refused, whatever runs there.
	if !closedByGateway(t, r.redirected("192.0.2.30:5432")) {
		t.Error("a connection to an address not had by name went through")
	}
	c.Close()
	sum := b.End()
	if len(sum.Events) != 3 {
		t.Fatalf("events %+v", sum.Events)
	}
	if ev := sum.Events[1]; !ev.Allowed || ev.Via != "dns" || ev.Name != "db.test" || ev.Addr != "192.0.2.20" {
		t.Errorf("the named connection: %+v", ev)
	}
	if ev := sum.Events[2]; ev.Allowed || ev.Via != "address" || ev.Reason != "no rule allows 192.0.2.30 on port 5432" {
		t.Errorf("the unnamed connection: %+v", ev)
	}
}

// serveDNS serves the gateway's stub on loopback UDP.
func (r *rig) serveDNS() string {
	r.t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		r.t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(r.g.serveDNS)}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go srv.ActivateAndServe()
	<-started
	r.t.Cleanup(func() { srv.Shutdown() })
	return pc.LocalAddr().String()
}

// lookup asks the stub at server and returns the answer's addresses, or
// the response code's name when it is not NOERROR.
func lookup(t *testing.T, server, name string, qtype uint16) []string {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	in, err := dns.Exchange(m, server)
	if err != nil {
		t.Fatal(err)
	}
	if in.Rcode != dns.RcodeSuccess {
		return []string{dns.RcodeToString[in.Rcode]}
	}
	var addrs []string
	for _, rr := range in.Answer {
		if a, ok := rr.(*dns.A); ok {
			addrs = append(addrs, a.A.String())
		}
	}
	return addrs
}

func TestDNSStubAnswersOnlyWhatThePolicyReaches(t *testing.T) {
	r := newRig(t, map[string]netip.Addr{"mirror.test": netip.MustParseAddr("192.0.2.40")}, resolver{
		"api.example.test":    {netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("127.0.0.1")},
		"rebind.example.test": {netip.MustParseAddr("169.254.169.254")},
	})
	b := r.bind(netpolicy.Caps{}, "*.example.test:443", "mirror.test:8080")
	server := r.serveDNS()
	for _, tt := range []struct {
		name  string
		qtype uint16
		want  []string
	}{
		{"api.example.test", dns.TypeA, []string{"192.0.2.10"}}, // loopback left out
		{"API.Example.Test.", dns.TypeA, []string{"192.0.2.10"}},
		{"mirror.test", dns.TypeA, []string{"192.0.2.40"}},
		{"rebind.example.test", dns.TypeA, []string{"REFUSED"}},
		{"missing.example.test", dns.TypeA, []string{"NXDOMAIN"}},
		{"api.example.test", dns.TypeAAAA, nil},
		{"api.example.test", dns.TypeTXT, []string{"REFUSED"}},
		{"elsewhere.test", dns.TypeA, []string{"REFUSED"}},
		{"example.test", dns.TypeA, []string{"REFUSED"}},
	} {
		if got := lookup(t, server, tt.name, tt.qtype); !slices.Equal(got, tt.want) {
			t.Errorf("%s %s: %v, want %v", tt.name, dns.TypeToString[tt.qtype], got, tt.want)
		}
	}
	sum := b.End()
	if len(sum.Events) != 9 || sum.Denied != 4 {
		t.Fatalf("events %+v (denied %d)", sum.Events, sum.Denied)
	}
	if ev := sum.Events[0]; ev.Reason != "left out 127.0.0.1: 127.0.0.1 is loopback" || ev.Rule != "*.example.test:443" {
		t.Errorf("the answer without loopback: %+v", ev)
	}
	if ev := sum.Events[7]; ev.Allowed || ev.Reason != "no rule allows elsewhere.test" {
		t.Errorf("the refused name: %+v", ev)
	}
	// After End the task is no one's: the stub refuses it.
	if got := lookup(t, server, "mirror.test", dns.TypeA); !slices.Equal(got, []string{"REFUSED"}) {
		t.Errorf("after End the stub answered %v", got)
	}
}

// TestDNSLookupsAreCapped: under a wildcard each new name would reach the
// zone's name servers; past MaxLookups distinct names the stub refuses,
// and the same name again still resolves.
func TestDNSLookupsAreCapped(t *testing.T) {
	names := resolver{}
	for i := range MaxLookups + 1 {
		names[fmt.Sprintf("n%d.example.test", i)] = []netip.Addr{netip.MustParseAddr("192.0.2.50")}
	}
	r := newRig(t, nil, names)
	b := r.bind(netpolicy.Caps{}, "*.example.test")
	server := r.serveDNS()
	for i := range MaxLookups {
		if got := lookup(t, server, fmt.Sprintf("n%d.example.test", i), dns.TypeA); len(got) != 1 || got[0] != "192.0.2.50" {
			t.Fatalf("lookup %d: %v", i, got)
		}
	}
	if got := lookup(t, server, fmt.Sprintf("n%d.example.test", MaxLookups), dns.TypeA); !slices.Equal(got, []string{"REFUSED"}) {
		t.Errorf("lookup past the cap: %v", got)
	}
	if got := lookup(t, server, "n0.example.test", dns.TypeA); !slices.Equal(got, []string{"192.0.2.50"}) {
		t.Errorf("a name looked up before, past the cap: %v", got)
	}
	sum := b.End()
	if last := sum.Events[MaxLookups]; !strings.Contains(last.Reason, "distinct names resolved") {
		t.Errorf("the refusal past the cap: %+v", last)
	}
}

func TestCapsEndAndRefuse(t *testing.T) {
	r := newRig(t, map[string]netip.Addr{"api.test": netip.MustParseAddr("192.0.2.10")}, nil)
	r.host("192.0.2.10:443", echo)
	t.Run("connections", func(t *testing.T) {
		b := r.bind(netpolicy.Caps{Connections: 1}, "api.test:443")
		defer b.End()
		proxy := r.listen(r.g.serveProxy)
		if _, resp := connect(t, proxy, "api.test:443"); resp.StatusCode != http.StatusOK {
			t.Fatal(resp.Status)
		}
		_, resp := connect(t, proxy, "api.test:443")
		if got := body(t, resp); resp.StatusCode != http.StatusForbidden || !strings.Contains(got, "the cap of 1 connections is reached") {
			t.Errorf("the second connection: %s %q", resp.Status, got)
		}
	})
	t.Run("bytes", func(t *testing.T) {
		b := r.bind(netpolicy.Caps{BytesOut: 10}, "api.test:443")
		c, resp := connect(t, r.listen(r.g.serveProxy), "api.test:443")
		if resp.StatusCode != http.StatusOK {
			t.Fatal(resp.Status)
		}
		roundTrip(t, c, "0123456789")
		io.WriteString(c, "over")
		if !closedByGateway(t, c) {
			t.Fatal("the connection outlived the cap")
		}
		r.waitMoved(b, 10)
		ev := only(t, b.End())
		if ev.Reason != "cut: the cap of 10 bytes out is reached" {
			t.Errorf("the cut connection: %+v", ev)
		}
	})
	t.Run("end", func(t *testing.T) {
		b := r.bind(netpolicy.Caps{}, "api.test:443")
		proxy := r.listen(r.g.serveProxy)
		c, resp := connect(t, proxy, "api.test:443")
		if resp.StatusCode != http.StatusOK {
			t.Fatal(resp.Status)
		}
		roundTrip(t, c, "live")
		b.End()
		if !closedByGateway(t, c) {
			t.Error("End left a live connection open")
		}
		// The gateway resets an unbound peer's connection as soon as it
		// is accepted: the dial itself may see the reset.
		if again, err := net.Dial("tcp4", proxy); err == nil {
			defer again.Close()
			if !closedByGateway(t, again) {
				t.Error("after End the proxy served the task")
			}
		}
		if b, err := r.g.Bind(bound, netpolicy.Policy{Mode: netpolicy.AllowList}); err != nil {
			t.Errorf("the address could not be bound again after End: %v", err)
		} else {
			b.End()
		}
	})
}

func TestBindRefusals(t *testing.T) {
	r := newRig(t, nil, nil)
	if _, err := r.g.Bind(bound, netpolicy.Policy{Mode: netpolicy.None}); err == nil || !strings.Contains(err.Error(), "is not an allow-list") {
		t.Errorf("Bind of a policy without network: %v", err)
	}
	b := r.bind(netpolicy.Caps{}, "api.test")
	defer b.End()
	if _, err := r.g.Bind(bound, netpolicy.Policy{Mode: netpolicy.AllowList}); err == nil || !strings.Contains(err.Error(), "already bound") {
		t.Errorf("Bind of a bound address: %v", err)
	}
}

func TestAllocateGoesRoundTheSubnet(t *testing.T) {
	g, err := newGateway(Config{Instance: "unit", RunDir: t.TempDir(), Subnet: netip.MustParsePrefix("100.79.1.0/28")})
	if err != nil {
		t.Fatal(err)
	}
	if g.Addr().String() != "100.79.1.1" || g.Subnet().String() != "100.79.1.0/28" || g.ProxyURL() != "http://100.79.1.1:3128" {
		t.Errorf("address %s, subnet %s, proxy %s", g.Addr(), g.Subnet(), g.ProxyURL())
	}
	var got []netip.Addr
	for {
		a, err := g.Allocate()
		if err != nil {
			if !strings.Contains(err.Error(), "every address of the egress subnet 100.79.1.0/28 is in use") {
				t.Fatal(err)
			}
			break
		}
		got = append(got, a)
	}
	// 16 addresses less the network, the gateway's and the broadcast.
	if len(got) != 13 || got[0].String() != "100.79.1.2" || got[12].String() != "100.79.1.14" {
		t.Fatalf("allocated %v", got)
	}
	if err := g.claimLink(got[0]); err != nil {
		t.Fatal(err)
	}
	if err := g.claimLink(got[0]); err == nil || !strings.Contains(err.Error(), "already has a link") {
		t.Errorf("a second link: %v", err)
	}
	if err := g.claimLink(netip.MustParseAddr("100.79.1.15")); err == nil || !strings.Contains(err.Error(), "not an address the gateway allocated") {
		t.Errorf("a link for an address not allocated: %v", err)
	}
	g.setLink(got[0], "")
	g.mu.Lock()
	delete(g.links, got[5])
	g.mu.Unlock()
	if a, err := g.Allocate(); err != nil || a != got[5] {
		t.Errorf("after a free the next address is %v, %v; want %v", a, err, got[5])
	}
	for _, bad := range []string{"100.79.1.0/29", "fd00::/64"} {
		if _, err := newGateway(Config{Subnet: netip.MustParsePrefix(bad)}); err == nil {
			t.Errorf("a gateway on %s", bad)
		}
	}
}

// TestUpgradedConnectionGoesOnRaw: a WebSocket's request is checked and
// forwarded, then the connection carries the protocol's bytes both ways.
func TestUpgradedConnectionGoesOnRaw(t *testing.T) {
	r := newRig(t, map[string]netip.Addr{"ws.test": netip.MustParseAddr("192.0.2.60")}, nil)
	got := make(chan string, 1)
	r.host("192.0.2.60:80", func(c net.Conn) {
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		got <- req.RequestURI + " " + req.Header.Get("Upgrade") + " " + req.Header.Get("Proxy-Authorization")
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		io.Copy(c, br)
	})
	b := r.bind(netpolicy.Caps{}, "ws.test:80")
	c, err := net.Dial("tcp4", r.listen(r.g.serveProxy))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET http://ws.test/socket HTTP/1.1\r\nHost: ws.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nProxy-Authorization: Basic eDp5\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	if g := <-got; g != "/socket websocket " {
		t.Errorf("the test host saw %q", g)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "frame one")
	frame := make([]byte, len("frame one"))
	if _, err := io.ReadFull(br, frame); err != nil || string(frame) != "frame one" {
		t.Fatalf("after the upgrade: %q, %v", frame, err)
	}
	c.Close()
	r.waitMoved(b, 9)
	b.End()
}

// TestThisHostIsNeverReached: a name the operator maps to one of this
// host's own addresses is still refused, before any dial.
func TestThisHostIsNeverReached(t *testing.T) {
	var own netip.Addr
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap().Is4() && !ip.IsLoopback() {
				own = ip.Unmap()
				break
			}
		}
	}
	if !own.IsValid() {
		t.Skip("this host has no IPv4 address but loopback")
	}
	r := newRig(t, map[string]netip.Addr{"self.test": own}, nil)
	b := r.bind(netpolicy.Caps{}, "self.test:443")
	server := r.serveDNS()
	if got := lookup(t, server, "self.test", dns.TypeA); !slices.Equal(got, []string{"REFUSED"}) {
		t.Errorf("the stub answered this host's address: %v", got)
	}
	_, resp := connect(t, r.listen(r.g.serveProxy), "self.test:443")
	if got := body(t, resp); resp.StatusCode != http.StatusForbidden || !strings.Contains(got, own.String()+" is this host's") {
		t.Errorf("CONNECT to this host: %s %q", resp.Status, got)
	}
	b.End()
}

// TestMetricsAndResolvConf: the gateway is a collector of its decisions,
// and the containers' resolv.conf names it alone.
func TestMetricsAndResolvConf(t *testing.T) {
	r := newRig(t, nil, resolver{"a.test": {netip.MustParseAddr("192.0.2.70")}})
	b := r.bind(netpolicy.Caps{}, "a.test")
	server := r.serveDNS()
	lookup(t, server, "a.test", dns.TypeA)
	lookup(t, server, "b.test", dns.TypeA)
	lookup(t, server, "c.test", dns.TypeA)
	b.End()
	want := `
# HELP sandboxd_egress_decisions_total Decisions of the egress gateway for allow-listed tasks, by kind (dns or connect) and decision (allowed or denied).
# TYPE sandboxd_egress_decisions_total counter
sandboxd_egress_decisions_total{decision="allowed",kind="dns"} 1
sandboxd_egress_decisions_total{decision="denied",kind="dns"} 2
`
	if err := promtest.CollectAndCompare(r.g, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if err := os.MkdirAll(filepath.Dir(r.g.ResolvConf()), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := r.g.writeResolvConf(); err != nil {
		t.Fatal(err)
	}
	conf, err := os.ReadFile(r.g.ResolvConf())
	if err != nil || string(conf) != "nameserver 100.72.0.1\noptions ndots:0 attempts:1 timeout:2\n" {
		t.Errorf("resolv.conf %q, %v", conf, err)
	}
}

// TestUpdateCutsWhatTheNewPolicyRefuses: a policy put in force while the
// task runs decides its next connections, cuts a connection under way to
// a host it no longer allows, keeps one it still allows, and changes the
// ports the rules let through.
func TestUpdateCutsWhatTheNewPolicyRefuses(t *testing.T) {
	r := newRig(t, map[string]netip.Addr{"api.test": netip.MustParseAddr("192.0.2.10"), "other.test": netip.MustParseAddr("192.0.2.11")}, nil)
	r.host("192.0.2.10:443", echo)
	r.host("192.0.2.11:8080", echo)
	b := r.bind(netpolicy.Caps{}, "api.test:443", "other.test:8080")
	proxy := r.listen(r.g.serveProxy)
	kept, _ := connect(t, proxy, "other.test:8080")
	roundTrip(t, kept, "kept")
	cut, _ := connect(t, proxy, "api.test:443")
	roundTrip(t, cut, "cut")

	next := netpolicy.Policy{Mode: netpolicy.AllowList, Caps: b.(*binding).pol().Caps,
		Rules: []netpolicy.Rule{{Host: "other.test", Ports: []uint16{8080}}}}
	if err := b.Update(next); err != nil {
		t.Fatal(err)
	}
	if !closedByGateway(t, cut) {
		t.Error("the connection to api.test went on after the policy stopped allowing it")
	}
	roundTrip(t, kept, "still")
	if got := r.rules.count(); got != 1 || !r.rules.allowed[netip.AddrPortFrom(bound, 8080)] {
		t.Errorf("the rules let through %v, want 8080 only", r.rules.allowed)
	}
	if _, resp := connect(t, proxy, "api.test:443"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a new connection to api.test: %s", resp.Status)
	}
	if err := b.Update(netpolicy.Policy{Mode: netpolicy.None}); err == nil {
		t.Error("an update to no network was taken")
	}
	kept.Close()
	sum := b.End()
	if ev := sum.Events[1]; ev.Name != "api.test" || ev.Reason != "cut: the policy changed: no rule allows api.test on port 443" {
		t.Errorf("the cut connection's event: %+v", ev)
	}
	if ev := sum.Events[0]; ev.Name != "other.test" || ev.Reason != "" {
		t.Errorf("the kept connection's event: %+v", ev)
	}
	if err := b.Update(next); err == nil {
		t.Error("an update after the end was taken")
	}
}
