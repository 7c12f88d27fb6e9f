// Package gateway enforces allow-list network policies. It owns a network
// namespace of its own, where every allow-listed container's only
// interface leads: there it serves an HTTP(S) proxy, a transparent proxy
// for TCP that ignores the proxy settings, and a DNS stub, and nothing
// else is reachable or forwarded. Each connection is decided by the
// task's policy (netpolicy.Checker) against names it resolves itself, on
// the host side, and recorded in the task's log.
package gateway

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/internal/sandbox/netns"
	"github.com/sandboxd/sandboxd/netpolicy"
)

// The gateway's ports in its namespace.
const (
	// ProxyPort serves HTTP proxying (CONNECT and absolute URLs): what
	// HTTP_PROXY and HTTPS_PROXY name.
	ProxyPort = 3128
	// transparentPort receives the TCP connections a task opened to any
	// other address, redirected by the gateway's rules.
	transparentPort = 15001
	// refusedPort is never listened on: connections to ports no rule
	// allows are redirected there, and the kernel refuses them (RST).
	refusedPort = 15002
	dnsPort     = 53
)

// Resolver resolves names on the host side.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config configures a gateway.
type Config struct {
	// Instance names the daemon; its gateway's namespace and links carry
	// it, and a new gateway of the same instance removes an old one's.
	Instance string
	// RunDir holds the gateway's namespace and resolv.conf.
	RunDir string
	// Subnet is where the gateway and the containers get their addresses;
	// the gateway takes the first.
	Subnet netip.Prefix
	// Operator says which names the gateway resolves itself (Hosts).
	Operator netpolicy.Operator
	// Resolver resolves the other names (default: the host's).
	Resolver Resolver
	// Deny are more addresses no task may reach: sandboxd's listeners.
	Deny []netip.Prefix
	// Secrets, when not nil, are what the gateway may add to a task's
	// HTTPS requests: it then gives each container a CA of its own.
	Secrets *netpolicy.Secrets
	// UpstreamRoots verify the hosts whose TLS the gateway terminates
	// (default: the system's).
	UpstreamRoots *x509.CertPool
	// SystemBundle is the file of trusted certificates a container's
	// trust store holds besides its CA (default: SystemBundle).
	SystemBundle string
	Log          *slog.Logger
}

// DefaultSubnet is the gateway's subnet when the operator names none: a
// range of the shared address space, unlikely to be one of the host's.
var DefaultSubnet = netip.MustParsePrefix("100.72.0.0/16")

// Gateway is a running gateway.
type Gateway struct {
	cfg     Config
	nsPath  string
	addr    netip.Addr // the gateway's address, every container's route
	checker *netpolicy.Checker
	rules   portRules
	// dial connects to an allowed address from the host's side.
	dial func(ctx context.Context, network, address string) (net.Conn, error)
	log  *slog.Logger
	// decisions counts every task's decisions; the gateway is a
	// prometheus.Collector of them.
	decisions *prometheus.CounterVec

	mu       sync.Mutex
	next     uint32                    // offset of the next address to try
	links    map[netip.Addr]string     // allocated address -> gateway-side link, or ""
	bindings map[netip.Addr]*binding   // address -> the task bound to it
	cas      map[netip.Addr]*sandboxCA // address -> its container's CA
	// system is the system's certificates, read once (systemBundle).
	system struct {
		once sync.Once
		pem  []byte
		err  error
	}
	own ownAddrs

	listeners []net.Listener
	closers   []func() error
	wg        sync.WaitGroup
}

// portRules are the gateway's rules of which (address, port) pairs its
// transparent proxy receives: a ruleset in its namespace.
type portRules interface {
	allow(a netip.Addr, ports []uint16) error
	forget(a netip.Addr, ports []uint16) error
	close()
}

// dialTimeout bounds a connection to an allowed address.
const dialTimeout = 10 * time.Second

// Start makes the gateway's namespace (removing one an earlier instance of
// the same name left), its rules, and starts its proxy and DNS stub.
func Start(ctx context.Context, cfg Config) (_ *Gateway, err error) {
	g, err := newGateway(cfg)
	if err != nil {
		return nil, err
	}
	if err := g.removeLeftovers(); err != nil {
		return nil, err
	}
	if err := netns.New(g.nsPath); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			g.Close()
		}
	}()
	if err := netns.Run(g.nsPath, func() error {
		// Nothing is forwarded, and IPv6 goes nowhere.
		for key, value := range map[string]string{
			"net.ipv4.ip_forward":                "0",
			"net.ipv6.conf.all.disable_ipv6":     "1",
			"net.ipv6.conf.default.disable_ipv6": "1",
		} {
			if err := netns.Sysctl(key, value); err != nil {
				return fmt.Errorf("sysctl %s: %w", key, err)
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	rules, err := newRuleset(g.nsPath, g.addr)
	if err != nil {
		return nil, err
	}
	g.rules = rules
	if err := g.writeResolvConf(); err != nil {
		return nil, err
	}
	if err := g.serve(); err != nil {
		return nil, err
	}
	g.log.Info("egress gateway up", "address", g.addr, "subnet", cfg.Subnet, "proxy", fmt.Sprintf("http://%s:%d", g.addr, ProxyPort))
	return g, nil
}

// newGateway is the gateway of cfg before it has a namespace, rules or
// listeners: what decides and records.
func newGateway(cfg Config) (*Gateway, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if !cfg.Subnet.IsValid() {
		cfg.Subnet = DefaultSubnet
	}
	if cfg.SystemBundle == "" {
		cfg.SystemBundle = SystemBundle
	}
	if !cfg.Subnet.Addr().Is4() || cfg.Subnet.Bits() > 28 {
		return nil, fmt.Errorf("egress subnet %s: an IPv4 range of at least 16 addresses", cfg.Subnet)
	}
	g := &Gateway{
		cfg:      cfg,
		nsPath:   filepath.Join(cfg.RunDir, cfg.Instance, "netns"),
		addr:     cfg.Subnet.Masked().Addr().Next(),
		log:      cfg.Log,
		links:    map[netip.Addr]string{},
		bindings: map[netip.Addr]*binding{},
		cas:      map[netip.Addr]*sandboxCA{},
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandboxd_egress_decisions_total",
			Help: "Decisions of the egress gateway for allow-listed tasks, by kind (dns or connect) and decision (allowed or denied).",
		}, []string{"kind", "decision"}),
	}
	g.dial = (&net.Dialer{Timeout: dialTimeout}).DialContext
	deny := append([]netip.Prefix{cfg.Subnet.Masked()}, cfg.Deny...)
	g.checker = netpolicy.NewChecker(cfg.Operator.Hosts, deny)
	g.own.check = g.checker
	return g, nil
}

// Describe and Collect make the gateway a Prometheus collector of its
// decisions.
func (g *Gateway) Describe(ch chan<- *prometheus.Desc) { g.decisions.Describe(ch) }

// Collect: see Describe.
func (g *Gateway) Collect(ch chan<- prometheus.Metric) { g.decisions.Collect(ch) }

// Addr is the gateway's address: every allow-listed container's route,
// DNS server and proxy.
func (g *Gateway) Addr() netip.Addr { return g.addr }

// Subnet is where the gateway and its containers have their addresses.
func (g *Gateway) Subnet() netip.Prefix { return g.cfg.Subnet.Masked() }

// ProxyURL is the value of HTTP_PROXY and HTTPS_PROXY in the containers.
func (g *Gateway) ProxyURL() string { return fmt.Sprintf("http://%s:%d", g.addr, ProxyPort) }

// ResolvConf is the file to bind at /etc/resolv.conf in the containers.
func (g *Gateway) ResolvConf() string {
	return filepath.Join(g.cfg.RunDir, g.cfg.Instance, "resolv.conf")
}

func (g *Gateway) writeResolvConf() error {
	return os.WriteFile(g.ResolvConf(), []byte(fmt.Sprintf("nameserver %s\noptions ndots:0 attempts:1 timeout:2\n", g.addr)), 0o644)
}

// removeLeftovers removes the namespace an earlier gateway of the same
// instance left (its links go with it), and its containers' trust stores.
func (g *Gateway) removeLeftovers() error {
	if err := os.RemoveAll(g.trustDir()); err != nil {
		return err
	}
	if _, err := os.Stat(g.nsPath); err == nil {
		g.log.Info("removing an earlier gateway's namespace", "path", g.nsPath)
		return netns.Remove(g.nsPath)
	}
	return nil
}

// Close stops the gateway and removes its namespace, and with it every
// link still attached.
func (g *Gateway) Close() error {
	var errs []error
	for _, l := range g.listeners {
		l.Close()
	}
	for _, c := range g.closers {
		if err := c(); err != nil {
			errs = append(errs, err)
		}
	}
	g.mu.Lock()
	for _, s := range g.bindings {
		s.closeConns()
	}
	g.mu.Unlock()
	g.wg.Wait()
	if g.rules != nil {
		g.rules.close()
	}
	if err := netns.Remove(g.nsPath); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(g.trustDir()); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Allocate returns an address of the subnet for one container, until
// Free; it goes round the subnet so that an address is reused as late as
// possible.
func (g *Gateway) Allocate() (netip.Addr, error) {
	a, err := g.allocate()
	if err != nil || !g.Terminates() {
		return a, err
	}
	if err := g.makeCA(a); err != nil {
		g.mu.Lock()
		delete(g.links, a)
		g.mu.Unlock()
		return netip.Addr{}, err
	}
	return a, nil
}

func (g *Gateway) allocate() (netip.Addr, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	size := uint32(1) << (32 - g.cfg.Subnet.Bits())
	base := g.cfg.Subnet.Masked().Addr().As4()
	first := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	// .0 is the network, .1 the gateway, the last the broadcast.
	for range size {
		off := 2 + g.next%(size-3)
		g.next++
		n := first + off
		a := netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
		if _, used := g.links[a]; !used {
			g.links[a] = ""
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("every address of the egress subnet %s is in use", g.cfg.Subnet)
}

// ownAddrs are this host's addresses, read again every few seconds: no
// task may reach them, and interfaces come and go.
type ownAddrs struct {
	check *netpolicy.Checker
	mu    sync.Mutex
	at    time.Time
	addrs []netip.Prefix
}

func (o *ownAddrs) get() []netip.Prefix {
	o.mu.Lock()
	defer o.mu.Unlock()
	if time.Since(o.at) < 2*time.Second {
		return o.addrs
	}
	o.at, o.addrs = time.Now(), nil
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok {
					o.addrs = append(o.addrs, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
				}
			}
		}
	}
	return o.addrs
}

// isOwn says whether a is one of this host's addresses.
func (g *Gateway) isOwn(a netip.Addr) bool {
	for _, p := range g.own.get() {
		if p.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}
