// Package access is who calls the engine and what each caller may ask
// for: the Caller an edge names (the operator, the token's caller, a
// tenant), the tenants file and its grants and quotas, the identities of
// the network listeners' callers, and the per-tenant rate of runs.
package access

import (
	"context"
	"slices"
	"strings"
)

// Caller is who asks for a run, as the edge that took the call knows it:
// the operator on the daemon's socket, or a client with the token of a
// network listener. What a caller may ask for beyond the defaults is the
// operator's grant.
type Caller struct {
	// Name names the caller in logs and refusals.
	Name string
	// Operator may ask for every operator mount; anyone else only for
	// those in Mounts.
	Operator bool
	Mounts   []string
	// Tenant, when the tenants file names the caller, bounds what it may
	// ask for and how much; nil leaves the daemon's bounds.
	Tenant *Tenant
	// Peer and Method are the client's address and the call it came in
	// by, for the audit log.
	Peer, Method string
}

// Operator is the caller on the daemon's own socket, and any caller of an
// engine in the operator's own process.
var Operator = Caller{Name: "operator", Operator: true}

// Owns says whether the caller may see and act on what tenant made: the
// operator may on everything, anyone else on its own only.
func (c Caller) Owns(tenant string) bool { return c.Operator || c.Name == tenant }

// MayUseImage says whether the caller may run image, a catalog name (a
// digest is checked once resolved to its name).
func (c Caller) MayUseImage(image string) bool {
	return c.Tenant == nil || len(c.Tenant.Images) == 0 || strings.HasPrefix(image, "sha256:") || slices.Contains(c.Tenant.Images, image)
}

// ToolGrants are the patterns of the tools the caller may call: all for
// the operator and without a tenants file, else the tenant's.
func (c Caller) ToolGrants() []string {
	if c.Operator || c.Tenant == nil {
		return []string{"*"}
	}
	return c.Tenant.Tools
}

// MaySecret says whether the caller's runs may have the gateway add the
// operator's secret name: any for the operator and without a tenants
// file, else those the tenant is granted.
func (c Caller) MaySecret(name string) bool {
	return c.Operator || c.Tenant == nil || slices.Contains(c.Tenant.Secrets, name)
}

// MayMount says whether the caller may ask for the operator mount name.
func (c Caller) MayMount(name string) bool { return c.Operator || slices.Contains(c.Mounts, name) }

type callerKey struct{}

// WithCaller says who calls, for the runs asked for with ctx. An edge sets
// it; a run without one is of a caller granted nothing.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom is the caller WithCaller set, or one granted nothing.
func CallerFrom(ctx context.Context) Caller {
	if c, ok := ctx.Value(callerKey{}).(Caller); ok {
		return c
	}
	return Caller{Name: "unknown"}
}
