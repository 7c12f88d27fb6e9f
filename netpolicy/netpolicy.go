// Package netpolicy defines the network a task may have and the operator's
// say over it: no network at all (None, the default), or an egress
// allow-list (AllowList) of host names and address ranges, each with its
// ports, that only the operator's rules may permit. It decides each
// connection of an allow-listed task (Checker) and keeps the record of
// what the task asked for and got (Log). netpolicy/gateway enforces it.
package netpolicy

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Mode is a kind of network access.
type Mode string

const (
	// None gives a container no network but loopback.
	None Mode = "none"
	// AllowList gives a container one route, to sandboxd's gateway, which
	// lets through only the connections the policy's rules allow.
	AllowList Mode = "allowlist"
)

// Rule allows connections to one host name (or every name below a
// domain, "*.example.org") or to one range of addresses, on some ports.
type Rule struct {
	// Host is a name, lower case, or "*." and a domain, which matches
	// every name below the domain but not the domain itself.
	Host string `json:"host,omitempty"`
	// CIDR is a range of IPv4 addresses, such as 10.1.2.0/24.
	CIDR string `json:"cidr,omitempty"`
	// Ports are the TCP ports allowed; none means DefaultPorts.
	Ports []uint16 `json:"ports,omitempty"`
}

// DefaultPorts are the ports of a rule that names none: the web's.
var DefaultPorts = []uint16{80, 443}

// Caps bound what an allow-listed task may move; 0 means the operator's
// default.
type Caps struct {
	// BytesOut and BytesIn bound the bytes sent and received through the
	// gateway, over all of the task's connections.
	BytesOut int64 `json:"bytes_out,omitempty"`
	BytesIn  int64 `json:"bytes_in,omitempty"`
	// Connections bounds how many connections the task may open.
	Connections int `json:"connections,omitempty"`
}

// Policy is the network a task runs with.
type Policy struct {
	Mode Mode `json:"mode"`
	// Name is the operator's named policy the request chose, if any.
	Name  string `json:"name,omitempty"`
	Rules []Rule `json:"rules,omitempty"`
	Caps  Caps   `json:"caps,omitzero"`
	// Secrets name the operator's secrets the gateway adds to the task's
	// requests; their values are never part of a policy.
	Secrets []string `json:"secrets,omitempty"`
}

// ParseRule reads the command-line form of a rule: HOST or CIDR, then
// optionally a colon and ports separated by commas ("pypi.internal:443",
// "*.example.org:80,443", "10.1.0.0/16:5432").
func ParseRule(s string) (Rule, error) {
	target, ports, hasPorts := strings.Cut(s, ":")
	var r Rule
	if strings.Contains(target, "/") {
		r.CIDR = target
	} else {
		r.Host = target
	}
	if hasPorts {
		for _, p := range strings.Split(ports, ",") {
			n, err := strconv.ParseUint(p, 10, 16)
			if err != nil || n == 0 {
				return Rule{}, fmt.Errorf("rule %q: %q is not a port (1-65535)", s, p)
			}
			r.Ports = append(r.Ports, uint16(n))
		}
	}
	if err := r.Validate(); err != nil {
		return Rule{}, fmt.Errorf("rule %q: %w", s, err)
	}
	return r, nil
}

// String is the command-line form of r.
func (r Rule) String() string {
	target := r.Host
	if r.CIDR != "" {
		target = r.CIDR
	}
	if len(r.Ports) == 0 {
		return target
	}
	ports := make([]string, len(r.Ports))
	for i, p := range r.Ports {
		ports[i] = strconv.Itoa(int(p))
	}
	return target + ":" + strings.Join(ports, ",")
}

// maxNameBytes is the longest DNS name.
const maxNameBytes = 253

// Validate refuses a rule that names both or neither of a host and a
// range, a name that is not a DNS name, a range that is not an IPv4
// prefix, or a port 0.
func (r Rule) Validate() error {
	switch {
	case r.Host != "" && r.CIDR != "":
		return fmt.Errorf("names both a host and a cidr")
	case r.Host == "" && r.CIDR == "":
		return fmt.Errorf("names neither a host nor a cidr")
	case r.CIDR != "":
		p, err := netip.ParsePrefix(r.CIDR)
		if err != nil || !p.Addr().Is4() || p != p.Masked() {
			return fmt.Errorf("cidr %q is not an IPv4 range such as 10.1.2.0/24", r.CIDR)
		}
	default:
		if !validHostPattern(r.Host) {
			return fmt.Errorf("host %q is not a DNS name (lower case) or *.domain", r.Host)
		}
	}
	if slices.Contains(r.Ports, 0) {
		return fmt.Errorf("port 0")
	}
	return nil
}

// validHostPattern says whether h is a lower-case DNS name of at least
// two labels, or "*." and such a name.
func validHostPattern(h string) bool {
	name := strings.TrimPrefix(h, "*.")
	if len(name) > maxNameBytes || !strings.Contains(name, ".") && h != name {
		return false
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// EffectivePorts are the rule's ports, DefaultPorts when it names none.
func (r Rule) EffectivePorts() []uint16 {
	if len(r.Ports) == 0 {
		return DefaultPorts
	}
	return r.Ports
}

// MatchesName says whether r allows the name on the port.
func (r Rule) MatchesName(name string, port uint16) bool {
	return slices.Contains(r.EffectivePorts(), port) && r.MatchesHost(name)
}

// MatchesHost says whether r names the host, whatever the port: what a
// DNS answer needs.
func (r Rule) MatchesHost(name string) bool {
	if r.Host == "" {
		return false
	}
	if domain, ok := strings.CutPrefix(r.Host, "*."); ok {
		return strings.HasSuffix(name, "."+domain)
	}
	return name == r.Host
}

// MatchesAddr says whether r allows the address on the port.
func (r Rule) MatchesAddr(addr netip.Addr, port uint16) bool {
	if r.CIDR == "" || !slices.Contains(r.EffectivePorts(), port) {
		return false
	}
	p, err := netip.ParsePrefix(r.CIDR)
	return err == nil && p.Contains(addr.Unmap())
}

// Covers says whether everything r allows, wider allows too: how the
// operator's rules bound what a request may ask for.
func (wider Rule) Covers(r Rule) bool {
	for _, p := range r.EffectivePorts() {
		if !slices.Contains(wider.EffectivePorts(), p) {
			return false
		}
	}
	switch {
	case r.Host != "" && wider.Host != "":
		if r.Host == wider.Host {
			return true
		}
		domain, ok := strings.CutPrefix(wider.Host, "*.")
		return ok && strings.HasSuffix(strings.TrimPrefix(r.Host, "*."), "."+domain)
	case r.CIDR != "" && wider.CIDR != "":
		outer, err1 := netip.ParsePrefix(wider.CIDR)
		inner, err2 := netip.ParsePrefix(r.CIDR)
		return err1 == nil && err2 == nil && outer.Bits() <= inner.Bits() && outer.Contains(inner.Addr())
	}
	return false
}

// Ports are every port the policy's rules allow, sorted: a connection to
// any other port can be refused before anything is read.
func (p Policy) Ports() []uint16 {
	var out []uint16
	for _, r := range p.Rules {
		for _, port := range r.EffectivePorts() {
			if !slices.Contains(out, port) {
				out = append(out, port)
			}
		}
	}
	slices.Sort(out)
	return out
}
