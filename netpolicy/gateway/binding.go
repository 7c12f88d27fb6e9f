package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/netpolicy"
)

// binding is a task bound to the address of its container's link: its
// policy, what it has used of its caps, and its log.
type binding struct {
	g     *Gateway
	addr  netip.Addr
	start time.Time
	log   netpolicy.Log

	mu sync.Mutex
	// policy is read with pol: Update changes it while the task runs.
	policy netpolicy.Policy
	// open are the allowed connections under way, by their event, with
	// what they were allowed to: an Update cuts those it no longer allows.
	open   map[int]openConn
	names  map[netip.Addr]string // addresses the stub answered, to the name asked
	looked map[string]bool       // names resolved upstream for the task
	conns  map[net.Conn]struct{}
	opened int
	out    int64
	in     int64
	ended  bool
}

// Bind gives the container at addr the task's policy until End: until
// then, the gateway refuses everything from that address.
func (g *Gateway) Bind(addr netip.Addr, p netpolicy.Policy) (netpolicy.Binding, error) {
	if p.Mode != netpolicy.AllowList {
		return nil, fmt.Errorf("bind %s: policy %q is not an allow-list", addr, p.Mode)
	}
	s := &binding{g: g, addr: addr, policy: p, start: time.Now(), open: map[int]openConn{},
		names: map[netip.Addr]string{}, looked: map[string]bool{}, conns: map[net.Conn]struct{}{}}
	g.mu.Lock()
	if _, taken := g.bindings[addr]; taken {
		g.mu.Unlock()
		return nil, fmt.Errorf("bind %s: already bound", addr)
	}
	g.bindings[addr] = s
	g.mu.Unlock()
	if err := g.rules.allow(addr, p.Ports()); err != nil {
		g.mu.Lock()
		delete(g.bindings, addr)
		g.mu.Unlock()
		return nil, fmt.Errorf("bind %s: %w", addr, err)
	}
	return s, nil
}

// pol is the task's policy now.
func (s *binding) pol() netpolicy.Policy {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.policy
}

// openConn is an allowed connection under way: where it goes, and its two
// ends.
type openConn struct {
	t          target
	client, up net.Conn
}

// underway records the allowed connection of event idx until the
// function it returns is called, when the connection has ended.
func (s *binding) underway(idx int, t target, client, up net.Conn) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open[idx] = openConn{t: t, client: client, up: up}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.open, idx)
	}
}

// Update makes p the task's policy: connections it decides from now on are
// decided by p, its caps count what the task has used so far, and each
// connection under way that p does not allow is cut. An Update to a policy
// the rules cannot take leaves the old one.
func (s *binding) Update(p netpolicy.Policy) error {
	if p.Mode != netpolicy.AllowList {
		return fmt.Errorf("update %s: policy %q is not an allow-list", s.addr, p.Mode)
	}
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return fmt.Errorf("update %s: the task has ended", s.addr)
	}
	old := s.policy
	s.mu.Unlock()
	added, removed := portsDiff(old.Ports(), p.Ports())
	if err := s.g.rules.allow(s.addr, added); err != nil {
		return fmt.Errorf("update %s: %w", s.addr, err)
	}
	s.mu.Lock()
	s.policy = p
	var cut []int
	var conns []openConn
	for idx, oc := range s.open {
		if reason := s.g.stillAllowed(p, oc.t); reason != "" {
			cut, conns = append(cut, idx), append(conns, oc)
			delete(s.open, idx)
		}
	}
	s.mu.Unlock()
	// Removed ports go after the policy: a connection to one is refused
	// by the new policy until the rules refuse it too.
	if err := s.g.rules.forget(s.addr, removed); err != nil {
		s.g.log.Warn("forget a task's ports", "addr", s.addr, "err", err)
	}
	for i, oc := range conns {
		s.log.Cut(cut[i], "the policy changed: "+s.g.stillAllowed(p, oc.t))
		reset(oc.client)
		reset(oc.up)
	}
	return nil
}

// stillAllowed says why p does not allow the connection to t, or "".
func (g *Gateway) stillAllowed(p netpolicy.Policy, t target) string {
	if d := g.checker.Addr(p, t.name, t.addr, t.port); !d.Allowed {
		return d.Reason
	}
	return ""
}

// portsDiff are the ports of next not in prev, and of prev not in next.
func portsDiff(prev, next []uint16) (added, removed []uint16) {
	for _, p := range next {
		if !slices.Contains(prev, p) {
			added = append(added, p)
		}
	}
	for _, p := range prev {
		if !slices.Contains(next, p) {
			removed = append(removed, p)
		}
	}
	return added, removed
}

// Follow has fn told of the task's events as they are recorded.
func (s *binding) Follow(fn netpolicy.Follower) { s.log.Follow(fn) }

// End unbinds the task, ends its connections, and returns its record.
func (s *binding) End() netpolicy.Summary {
	s.mu.Lock()
	already := s.ended
	s.ended = true
	s.mu.Unlock()
	if !already {
		s.g.mu.Lock()
		delete(s.g.bindings, s.addr)
		s.g.mu.Unlock()
		if err := s.g.rules.forget(s.addr, s.pol().Ports()); err != nil {
			s.g.log.Warn("forget a task's ports", "addr", s.addr, "err", err)
		}
		s.closeConns()
	}
	return s.log.Summary()
}

// bindingOf returns the task bound to the peer of c, or nil.
func (g *Gateway) bindingOf(remote net.Addr) *binding {
	ap, err := netip.ParseAddrPort(remote.String())
	if err != nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.bindings[ap.Addr().Unmap()]
}

func (s *binding) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *binding) untrack(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
}

func (s *binding) closeConns() {
	s.mu.Lock()
	conns := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		reset(c)
	}
}

// remember records the name the stub answered addrs for: a connection to
// one of them that carries no name of its own is taken to be for it.
func (s *binding) remember(name string, addrs []netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range addrs {
		s.names[a] = name
	}
}

func (s *binding) nameOf(a netip.Addr) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.names[a]
	return n, ok
}

// target is what a task asked to connect to.
type target struct {
	name string // the name asked for, or "" for a bare address
	via  string // where the name came from (netpolicy.Event.Via)
	// addr is the address the task connected to (transparent), or the
	// address it named (proxy); invalid for a name through the proxy.
	addr netip.Addr
	port uint16
}

// errRefused is a connection the policy does not allow; the event says why.
var errRefused = errors.New("refused by the network policy")

// MaxLookups bounds the distinct names a task may have the gateway
// resolve upstream. Under a wildcard rule (*.example.org) every sub-label
// a task looks up reaches the upstream resolver, and with it whoever runs
// the zone's name servers: a channel out. The cap bounds what it carries
// (and each lookup is in the bundle); the same name again costs nothing.
const MaxLookups = 256

// mayLookUp counts name against MaxLookups, or says why not.
func (s *binding) mayLookUp(name string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.looked[name] {
		return "", true
	}
	if len(s.looked) >= MaxLookups {
		return fmt.Sprintf("the task had %d distinct names resolved, the most a task may (a wildcard rule would otherwise carry data out in the names)", MaxLookups), false
	}
	s.looked[name] = true
	return "", true
}

// record adds a decision to the task's log and counts it for the metrics.
func (s *binding) record(ev netpolicy.Event) int {
	decision := "denied"
	if ev.Allowed {
		decision = "allowed"
	}
	s.g.decisions.WithLabelValues(ev.Kind, decision).Inc()
	return s.log.Add(ev)
}

// refused records a connection to t that the gateway refuses before
// dialling, and returns its event's index.
func (s *binding) refused(t target, reason string) int {
	ev := netpolicy.Event{Time: time.Now().UTC(), Kind: "connect", Name: t.name, Via: t.via, Port: t.port, Reason: reason}
	if t.addr.IsValid() {
		ev.Addr = t.addr.String()
	}
	return s.record(ev)
}

// dial decides t and, when allowed, connects to it from the host's side.
// It records the decision and returns what was allowed (the name it was
// decided by, the address dialled) and the event's index for the bytes.
func (s *binding) dial(ctx context.Context, t target) (net.Conn, target, int, error) {
	ev := netpolicy.Event{Time: time.Now().UTC(), Kind: "connect", Name: t.name, Via: t.via, Port: t.port}
	if t.addr.IsValid() {
		ev.Addr = t.addr.String()
	}
	refuse := func(reason string) (net.Conn, target, int, error) {
		ev.Reason = reason
		return nil, target{}, s.record(ev), errRefused
	}
	if reason := s.overCaps(); reason != "" {
		return refuse(reason)
	}
	var candidates []netip.Addr
	pol := s.pol()
	byRange := t.addr.IsValid() && s.g.checker.Addr(pol, "", t.addr, t.port).Allowed
	switch {
	case byRange:
		// The address is allowed on its own: whatever name the
		// connection carries, it goes where the task asked.
		candidates = []netip.Addr{t.addr}
		t.name = ""
	case t.name != "":
		d := s.g.checker.Name(pol, t.name, t.port)
		if !d.Allowed {
			return refuse(d.Reason)
		}
		if reason, ok := s.mayLookUp(t.name); !ok {
			return refuse(reason)
		}
		addrs, err := s.g.resolve(ctx, t.name)
		if err != nil {
			return refuse(fmt.Sprintf("%s does not resolve: %v", t.name, err))
		}
		if t.addr.IsValid() && !slices.Contains(addrs, t.addr) {
			// A TLS name or Host header that names an allowed host while
			// the connection goes elsewhere.
			return refuse(fmt.Sprintf("the connection to %s names %s, which resolves to %s", t.addr, t.name, joinAddrs(addrs)))
		}
		if t.addr.IsValid() {
			candidates = []netip.Addr{t.addr}
		} else {
			candidates = addrs
		}
	default:
		candidates = []netip.Addr{t.addr}
	}
	var lastReason string
	for _, a := range candidates {
		d := s.g.checker.Addr(pol, t.name, a, t.port)
		if d.Allowed && s.g.isOwn(a) {
			d = netpolicy.Decision{Reason: fmt.Sprintf("%s is this host's", a)}
		}
		if !d.Allowed {
			lastReason = d.Reason
			continue
		}
		ev.Addr, ev.Rule = a.String(), d.Rule
		s.mu.Lock()
		s.opened++
		s.mu.Unlock()
		up, err := s.g.dial(ctx, "tcp4", netip.AddrPortFrom(a, t.port).String())
		if err != nil {
			ev.Allowed, ev.Reason = true, "allowed, but the connection failed: "+err.Error()
			return nil, target{}, s.record(ev), err
		}
		ev.Allowed = true
		t.addr = a
		return up, t, s.record(ev), nil
	}
	ev.Addr = joinAddrs(candidates)
	return refuse(lastReason)
}

// overCaps says which cap the task has used up, if any.
func (s *binding) overCaps() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.policy.Caps
	switch {
	case s.ended:
		return "the task has ended"
	case c.Connections > 0 && s.opened >= c.Connections:
		return fmt.Sprintf("the cap of %d connections is reached", c.Connections)
	case c.BytesOut > 0 && s.out >= c.BytesOut:
		return fmt.Sprintf("the cap of %d bytes out is reached", c.BytesOut)
	case c.BytesIn > 0 && s.in >= c.BytesIn:
		return fmt.Sprintf("the cap of %d bytes in is reached", c.BytesIn)
	}
	return ""
}

// moved adds n bytes sent (out) or received and says whether the task is
// still within its caps.
func (s *binding) moved(n int64, out bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if out {
		s.out += n
		return s.policy.Caps.BytesOut <= 0 || s.out <= s.policy.Caps.BytesOut
	}
	s.in += n
	return s.policy.Caps.BytesIn <= 0 || s.in <= s.policy.Caps.BytesIn
}

// nameAllowed says whether any rule of the task allows the name, on any
// of its ports: what the DNS stub answers.
func (s *binding) nameAllowed(name string) (netpolicy.Rule, bool) {
	for _, r := range s.pol().Rules {
		if r.MatchesHost(name) {
			return r, true
		}
	}
	return netpolicy.Rule{}, false
}

// resolve resolves a name on the host's side: the operator's names first.
func (g *Gateway) resolve(ctx context.Context, name string) ([]netip.Addr, error) {
	if a, ok := g.checker.Resolved(name); ok {
		return []netip.Addr{a}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := g.cfg.Resolver.LookupNetIP(ctx, "ip4", name)
	if err != nil {
		return nil, err
	}
	for i := range addrs {
		addrs[i] = addrs[i].Unmap()
	}
	return addrs, nil
}

func joinAddrs(addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

// reset closes c with an RST rather than a FIN: a refusal, not an end.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}
