package netpolicy

import (
	"fmt"
	"net/netip"
)

// Checker decides the connections of allow-listed tasks: first the name
// and port a task asks for, then each address the gateway resolved the
// name to (or the bare address a task asked for). The second step holds
// whatever names resolve to: an allowed name that resolves to loopback,
// to this host or to a private range is refused (DNS rebinding).
type Checker struct {
	hosts map[string]netip.Addr
	never []denied
}

// denied is a range no task may reach, and why.
type denied struct {
	prefix netip.Prefix
	why    string
}

// private are the ranges a task reaches only where a CIDR rule names the
// address, or the operator's --egress-host maps a name to it.
var private = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("198.18.0.0/15"),
}

// never are the ranges no rule opens.
var never = []denied{
	{netip.MustParsePrefix("0.0.0.0/8"), "an unspecified address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local (cloud metadata among it)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved range"},
}

// NewChecker returns the checker of a gateway: hosts are the operator's
// --egress-host names; own are the addresses of this host and of
// sandboxd's listeners and gateway, which no task may reach.
func NewChecker(hosts map[string]netip.Addr, own []netip.Prefix) *Checker {
	c := &Checker{hosts: hosts, never: append([]denied(nil), never...)}
	for _, p := range own {
		c.never = append(c.never, denied{p.Masked(), "this host or sandboxd itself"})
	}
	return c
}

// Decision is the verdict on one connection, and what it rests on.
type Decision struct {
	Allowed bool
	// Rule is the rule that allowed it.
	Rule string
	// Reason says why it was refused.
	Reason string
}

func allow(r Rule) Decision                   { return Decision{Allowed: true, Rule: r.String()} }
func refuse(format string, a ...any) Decision { return Decision{Reason: fmt.Sprintf(format, a...)} }

// Name decides a name on a port, before it is resolved.
func (c *Checker) Name(p Policy, name string, port uint16) Decision {
	if p.Mode != AllowList {
		return refuse("the task has no network")
	}
	for _, r := range p.Rules {
		if r.MatchesName(name, port) {
			return allow(r)
		}
	}
	return refuse("no rule allows %s on port %d", name, port)
}

// Resolved returns the operator's address for name, if it gave one.
func (c *Checker) Resolved(name string) (netip.Addr, bool) {
	a, ok := c.hosts[name]
	return a, ok
}

// Addr decides an address on a port: one that name (allowed by Name)
// resolved to, or, with name "", an address the task asked for itself,
// which only a CIDR rule allows.
func (c *Checker) Addr(p Policy, name string, addr netip.Addr, port uint16) Decision {
	if p.Mode != AllowList {
		return refuse("the task has no network")
	}
	addr = addr.Unmap()
	if !addr.Is4() {
		return refuse("%s: IPv6 goes nowhere", addr)
	}
	for _, d := range c.never {
		if d.prefix.Contains(addr) {
			return refuse("%s is %s", addr, d.why)
		}
	}
	var byRange *Rule
	for i, r := range p.Rules {
		if r.MatchesAddr(addr, port) {
			byRange = &p.Rules[i]
			break
		}
	}
	if name == "" {
		if byRange == nil {
			return refuse("no rule allows %s on port %d", addr, port)
		}
		if isPrivate(addr) && !namesPrivate(*byRange, addr) {
			return refuse("%s is in a private range, which %s does not name", addr, byRange)
		}
		return allow(*byRange)
	}
	decided := c.Name(p, name, port)
	if !decided.Allowed {
		return decided
	}
	if vouched, ok := c.hosts[name]; ok && vouched == addr {
		return decided
	}
	if isPrivate(addr) {
		if byRange != nil && namesPrivate(*byRange, addr) {
			return allow(*byRange)
		}
		return refuse("%s resolves to %s, in a private range no rule names", name, addr)
	}
	return decided
}

func isPrivate(a netip.Addr) bool {
	for _, p := range private {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// namesPrivate says whether r names the private range of a, rather than
// covering it as part of something wider (0.0.0.0/0 opens no private
// range).
func namesPrivate(r Rule, a netip.Addr) bool {
	rp, err := netip.ParsePrefix(r.CIDR)
	if err != nil {
		return false
	}
	for _, p := range private {
		if p.Contains(a) {
			return rp.Bits() >= p.Bits()
		}
	}
	return false
}
