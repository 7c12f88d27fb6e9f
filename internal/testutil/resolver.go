package testutil

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"sync"
)

// Resolver stands in for the host's resolver in tests of the egress
// gateway: it answers from Names, sends no packet, and records every name
// it was asked, so that a test can prove a name never left the gateway.
type Resolver struct {
	Names map[string][]netip.Addr

	mu    sync.Mutex
	asked []string
}

// LookupNetIP answers host from Names, or "no such host".
func (r *Resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, host)
	if a, ok := r.Names[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// WasAsked says whether name was looked up.
func (r *Resolver) WasAsked(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.asked, name)
}

// Distinct is how many distinct names were looked up.
func (r *Resolver) Distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(slices.Compact(slices.Sorted(slices.Values(r.asked))))
}
