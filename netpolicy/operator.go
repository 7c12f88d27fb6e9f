package netpolicy

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/containerd/errdefs"
)

// Request is the network a request asks for: a mode, and for AllowList the
// operator's named policy, rules of its own, or both, and caps.
type Request struct {
	Mode   Mode
	Policy string
	Rules  []Rule
	Caps   Caps
	// Secrets are the operator's secrets the task's requests get.
	Secrets []string
}

// Operator is what the operator allows. With neither Permitted rules nor
// Policies, AllowList is refused.
type Operator struct {
	// Permitted are the rules a request's own rules must fall within.
	Permitted []Rule
	// Policies are named sets of rules a request may choose by name.
	Policies map[string][]Rule
	// Hosts are names the gateway resolves itself, to an address the
	// operator vouches for (one of a private range included).
	Hosts map[string]netip.Addr
	// DefaultCaps apply to what a request leaves at 0; MaxCaps bound what
	// it may ask for.
	DefaultCaps, MaxCaps Caps
	// Secrets are the credentials the gateway may add to a task's
	// requests (nil: none).
	Secrets *Secrets
}

// MaxRules bounds the rules of one policy.
const MaxRules = 64

// DefaultOperator allows no network but None, with caps for when the
// operator adds rules.
func DefaultOperator() Operator {
	return Operator{
		DefaultCaps: Caps{BytesOut: 64 << 20, BytesIn: 256 << 20, Connections: 256},
		MaxCaps:     Caps{BytesOut: 1 << 30, BytesIn: 4 << 30, Connections: 4096},
	}
}

// Validate refuses an operator configuration that contradicts itself.
func (o Operator) Validate() error {
	for _, r := range o.Permitted {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("--egress-allow %s: %w", r, err)
		}
	}
	for name, rules := range o.Policies {
		if !validPolicyName(name) {
			return fmt.Errorf("--egress-policy %q: a name is 1-32 of a-z 0-9 - _", name)
		}
		if len(rules) == 0 || len(rules) > MaxRules {
			return fmt.Errorf("--egress-policy %s: 1 to %d rules", name, MaxRules)
		}
		for _, r := range rules {
			if err := r.Validate(); err != nil {
				return fmt.Errorf("--egress-policy %s: %s: %w", name, r, err)
			}
		}
	}
	for name, addr := range o.Hosts {
		if !validHostPattern(name) || strings.HasPrefix(name, "*.") {
			return fmt.Errorf("--egress-host %s: not a DNS name", name)
		}
		if !addr.Is4() {
			return fmt.Errorf("--egress-host %s=%s: not an IPv4 address", name, addr)
		}
	}
	for _, c := range []Caps{o.DefaultCaps, o.MaxCaps} {
		if c.BytesOut <= 0 || c.BytesIn <= 0 || c.Connections <= 0 {
			return fmt.Errorf("egress caps %+v: every cap must be positive", c)
		}
	}
	if o.DefaultCaps.BytesOut > o.MaxCaps.BytesOut || o.DefaultCaps.BytesIn > o.MaxCaps.BytesIn || o.DefaultCaps.Connections > o.MaxCaps.Connections {
		return fmt.Errorf("egress caps: the defaults %+v are above the maxima %+v", o.DefaultCaps, o.MaxCaps)
	}
	return nil
}

func validPolicyName(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// PolicyNames are the named policies, sorted.
func (o Operator) PolicyNames() []string {
	names := make([]string, 0, len(o.Policies))
	for n := range o.Policies {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// AllowsNetwork says whether AllowList can be asked for at all.
func (o Operator) AllowsNetwork() bool { return len(o.Permitted) > 0 || len(o.Policies) > 0 }

// Resolve returns the policy of a request, refusing by field what is not
// well formed (INVALID_ARGUMENT) and what the operator does not allow
// (PERMISSION_DENIED, naming the rule).
func (o Operator) Resolve(req Request) (Policy, error) {
	switch req.Mode {
	case "", None:
		if req.Policy != "" || len(req.Rules) > 0 || len(req.Secrets) > 0 {
			return Policy{}, invalid("network.mode", "is none, which takes no policy, rules or secrets")
		}
		return Policy{Mode: None}, nil
	case AllowList:
	default:
		return Policy{}, invalid("network.mode", fmt.Sprintf("%q is not a network mode (known: %q, %q)", req.Mode, None, AllowList))
	}
	if !o.AllowsNetwork() {
		return Policy{}, permissionDenied("network.mode", "allowlist needs rules the operator permits (--egress-allow or --egress-policy), and this daemon has none")
	}
	if req.Policy == "" && len(req.Rules) == 0 {
		return Policy{}, invalid("network", "allowlist needs a policy name or rules")
	}
	p := Policy{Mode: AllowList, Name: req.Policy}
	if req.Policy != "" {
		rules, ok := o.Policies[req.Policy]
		if !ok {
			return Policy{}, permissionDenied("network.policy", fmt.Sprintf("%q is not a policy of the operator's (%q)", req.Policy, o.PolicyNames()))
		}
		p.Rules = append(p.Rules, rules...)
	}
	if len(p.Rules)+len(req.Rules) > MaxRules {
		return Policy{}, invalid("network.rules", fmt.Sprintf("%d rules, above the limit of %d", len(p.Rules)+len(req.Rules), MaxRules))
	}
	for i, r := range req.Rules {
		field := fmt.Sprintf("network.rules[%d]", i)
		if err := r.Validate(); err != nil {
			return Policy{}, invalid(field, err.Error())
		}
		if !slices.ContainsFunc(o.Permitted, func(w Rule) bool { return w.Covers(r) }) {
			return Policy{}, permissionDenied(field, fmt.Sprintf("%s is not within the rules the operator permits", r))
		}
		p.Rules = append(p.Rules, r)
	}
	caps, err := o.caps(req.Caps)
	if err != nil {
		return Policy{}, err
	}
	p.Caps = caps
	if p.Secrets, err = o.resolveSecrets(req.Secrets, p.Rules); err != nil {
		return Policy{}, err
	}
	return p, nil
}

// caps fills a request's caps from the defaults and refuses any above the
// maxima.
func (o Operator) caps(c Caps) (Caps, error) {
	if c.BytesOut < 0 || c.BytesIn < 0 || c.Connections < 0 {
		return Caps{}, invalid("network.caps", "must not be negative")
	}
	if c.BytesOut > o.MaxCaps.BytesOut || c.BytesIn > o.MaxCaps.BytesIn || c.Connections > o.MaxCaps.Connections {
		return Caps{}, invalid("network.caps", fmt.Sprintf("%+v is above the operator's maxima %+v", c, o.MaxCaps))
	}
	if c.BytesOut == 0 {
		c.BytesOut = o.DefaultCaps.BytesOut
	}
	if c.BytesIn == 0 {
		c.BytesIn = o.DefaultCaps.BytesIn
	}
	if c.Connections == 0 {
		c.Connections = o.DefaultCaps.Connections
	}
	return c, nil
}

func invalid(field, msg string) error {
	return errdefs.ErrInvalidArgument.WithMessage(field + ": " + msg)
}

func permissionDenied(field, msg string) error {
	return errdefs.ErrPermissionDenied.WithMessage(field + ": " + msg)
}
