package task

import (
	"context"
	"slices"
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
	// Peer and Method are the client's address and the call it came in
	// by, for the audit log.
	Peer, Method string
}

// Operator is the caller on the daemon's own socket, and any caller of an
// engine in the operator's own process.
var Operator = Caller{Name: "operator", Operator: true}

// mayMount says whether the caller may ask for the operator mount name.
func (c Caller) mayMount(name string) bool { return c.Operator || slices.Contains(c.Mounts, name) }

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
