package access

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/netpolicy"
)

// Tenant is a caller the operator names in the tenants file, with the
// quotas and bounds of what it may ask for. A zero quota or bound, or an
// empty list, leaves the daemon's own.
type Tenant struct {
	Name string `json:"name"`
	// TokenSHA256 is the hex SHA-256 of the tenant's bearer token, and
	// CertName the common name of its client certificate (mutual TLS).
	// A tenant has one of them or both.
	TokenSHA256 string `json:"token_sha256,omitempty"`
	CertName    string `json:"cert_name,omitempty"`

	MaxRunning    int `json:"max_running,omitempty"`
	MaxQueued     int `json:"max_queued,omitempty"`
	MaxSessions   int `json:"max_sessions,omitempty"`
	RunsPerMinute int `json:"runs_per_minute,omitempty"`
	// MaxLimits lowers the daemon's maximum limits, field by field.
	MaxLimits limits.Limits `json:"max_limits,omitzero"`
	// Runtimes, Images and Mounts are what the tenant may ask for, among
	// what the daemon has.
	Runtimes []string `json:"runtimes,omitempty"`
	Images   []string `json:"images,omitempty"`
	Mounts   []string `json:"mounts,omitempty"`
	// Tools are the patterns of the tools the tenant's programs may call
	// ("orders.search", "orders.*"); none without.
	Tools []string `json:"tools,omitempty"`
	// Network, when set, is the network the tenant may ask for: the
	// operator's named policies it may choose, and the rules its own
	// rules must fall within; an empty Network allows none.
	Network *TenantNetwork `json:"network,omitempty"`
	// Secrets are the names of the operator's secrets the tenant's
	// allow-listed runs may have the gateway add; none without.
	Secrets []string `json:"secrets,omitempty"`
}

// TenantNetwork is a tenant's share of the operator's network rules.
type TenantNetwork struct {
	Policies []string `json:"policies,omitempty"`
	// Rules are in the command-line form of --egress-allow.
	Rules []string `json:"rules,omitempty"`
}

// tenantsFile is the JSON of --tenants.
type tenantsFile struct {
	Tenants []Tenant `json:"tenants"`
}

// ParseTenants reads a tenants file, refusing unknown fields, repeated
// names, tokens and certificate names, and a tenant no caller can be.
func ParseTenants(b []byte) ([]Tenant, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f tenantsFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("tenants: %w", err)
	}
	names, tokens, certs := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for i, t := range f.Tenants {
		at := fmt.Sprintf("tenants[%d]", i)
		switch {
		case !validTenantName(t.Name):
			return nil, fmt.Errorf("%s: name %q: a name is 1-64 of a-z A-Z 0-9 . _ -", at, t.Name)
		case names[t.Name]:
			return nil, fmt.Errorf("%s: name %q is given twice", at, t.Name)
		case t.Name == Operator.Name:
			return nil, fmt.Errorf("%s: name %q is the socket's callers'", at, t.Name)
		case t.TokenSHA256 == "" && t.CertName == "":
			return nil, fmt.Errorf("%s (%s): needs token_sha256 or cert_name", at, t.Name)
		case t.MaxRunning < 0 || t.MaxQueued < 0 || t.MaxSessions < 0 || t.RunsPerMinute < 0:
			return nil, fmt.Errorf("%s (%s): quotas must not be negative (0 leaves the daemon's)", at, t.Name)
		}
		names[t.Name] = true
		if t.TokenSHA256 != "" {
			if b, err := hex.DecodeString(t.TokenSHA256); err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("%s (%s): token_sha256 is not 64 hex digits (sha256sum of the token)", at, t.Name)
			}
			if tokens[t.TokenSHA256] {
				return nil, fmt.Errorf("%s (%s): its token is another tenant's", at, t.Name)
			}
			tokens[t.TokenSHA256] = true
		}
		if t.CertName != "" {
			if certs[t.CertName] {
				return nil, fmt.Errorf("%s (%s): cert_name %q is another tenant's", at, t.Name, t.CertName)
			}
			certs[t.CertName] = true
		}
		if t.Network != nil {
			for _, r := range t.Network.Rules {
				if _, err := netpolicy.ParseRule(r); err != nil {
					return nil, fmt.Errorf("%s (%s): network: %w", at, t.Name, err)
				}
			}
		}
	}
	return f.Tenants, nil
}

func validTenantName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// NarrowNetwork is the operator's network narrowed to a tenant's share.
func NarrowNetwork(o netpolicy.Operator, n *TenantNetwork) (netpolicy.Operator, error) {
	if n == nil {
		return o, nil
	}
	narrowed := o
	narrowed.Permitted, narrowed.Policies = nil, map[string][]netpolicy.Rule{}
	for _, name := range n.Policies {
		rules, ok := o.Policies[name]
		if !ok {
			return netpolicy.Operator{}, fmt.Errorf("policy %q is not one of the operator's (%q)", name, o.PolicyNames())
		}
		narrowed.Policies[name] = rules
	}
	for _, s := range n.Rules {
		r, err := netpolicy.ParseRule(s)
		if err != nil {
			return netpolicy.Operator{}, err
		}
		if !slices.ContainsFunc(o.Permitted, func(w netpolicy.Rule) bool { return w.Covers(r) }) {
			return netpolicy.Operator{}, fmt.Errorf("rule %s is not within the rules the operator permits (--egress-allow)", r)
		}
		narrowed.Permitted = append(narrowed.Permitted, r)
	}
	return narrowed, nil
}

// Identities names the callers of the daemon's network listeners: by the
// SHA-256 of the bearer token they send, or by the common name of their
// verified client certificate. Set swaps the tenants while calls go on.
type Identities struct {
	// token is the caller of --token-file, if any.
	token *identity
	// certs names a caller by any verified certificate when no tenants
	// file does: the token's grants, under the certificate's name.
	certs bool
	grant Caller
	cur   atomic.Pointer[identitySet]

	mu      sync.Mutex // of the writers, Set and SetToken
	tenants []Tenant
}

type identity struct {
	sum    [sha256.Size]byte
	caller Caller
}

type identitySet struct {
	byToken map[[sha256.Size]byte]Caller
	byCert  map[string]Caller
	tenants bool
}

// NewIdentities names the callers of a daemon with grant as the token's
// caller: token (when not empty) identifies it; with certs, a verified
// client certificate that no tenant claims names a caller with its grants.
func NewIdentities(token string, grant Caller, certs bool) *Identities {
	id := &Identities{certs: certs, grant: grant}
	if token != "" {
		id.token = &identity{sum: sha256.Sum256([]byte(token)), caller: grant}
	}
	id.Set(nil)
	return id
}

// Set makes tenants the daemon's callers, besides the token's.
func (id *Identities) Set(tenants []Tenant) {
	id.mu.Lock()
	defer id.mu.Unlock()
	id.tenants = tenants
	id.store()
}

// SetToken makes token the one of --token-file's caller (a rotated token
// file, reloaded): calls with the old one are refused from now on; calls
// under way go on.
func (id *Identities) SetToken(token string) {
	id.mu.Lock()
	defer id.mu.Unlock()
	id.token = &identity{sum: sha256.Sum256([]byte(token)), caller: id.grant}
	id.store()
}

// store makes the set of the token and tenants the one Identify reads.
func (id *Identities) store() {
	tenants := id.tenants
	set := &identitySet{byToken: map[[sha256.Size]byte]Caller{}, byCert: map[string]Caller{}, tenants: tenants != nil}
	if id.token != nil {
		set.byToken[id.token.sum] = id.token.caller
	}
	for _, t := range tenants {
		c := Caller{Name: t.Name, Mounts: t.Mounts, Tenant: &t}
		if t.TokenSHA256 != "" {
			var sum [sha256.Size]byte
			hex.Decode(sum[:], []byte(t.TokenSHA256))
			set.byToken[sum] = c
		}
		if t.CertName != "" {
			set.byCert[t.CertName] = c
		}
	}
	id.cur.Store(set)
}

// Identify names the caller that sent token (empty for none) over a
// connection whose verified client certificate, if any, carries certName.
// A token wins over a certificate. Tokens are compared by their SHA-256,
// so the lookup's timing says nothing of a token's bytes.
func (id *Identities) Identify(token, certName string) (Caller, bool) {
	set := id.cur.Load()
	if token != "" {
		c, ok := set.byToken[sha256.Sum256([]byte(token))]
		return c, ok
	}
	if certName == "" {
		return Caller{}, false
	}
	if c, ok := set.byCert[certName]; ok {
		return c, true
	}
	if id.certs && !set.tenants {
		c := id.grant
		c.Name = certName
		return c, true
	}
	return Caller{}, false
}
