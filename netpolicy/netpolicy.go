// Package netpolicy defines the network policies a task may run under and
// the operator's choice of which are allowed.
//
// The only mode today is None: the container has a loopback interface and
// nothing else, so no packet can leave it. Every backend enforces it by
// starting the container in a network namespace of its own with no other
// interface.
package netpolicy

import (
	"fmt"
	"slices"

	"github.com/containerd/errdefs"
)

// Mode is a kind of network access.
type Mode string

// None gives a container no network but loopback.
const None Mode = "none"

// Policy is the network a task runs with.
type Policy struct {
	Mode Mode
}

// Allowed is the operator's set of modes a request may ask for.
type Allowed []Mode

// Resolve returns the policy for a requested mode; empty means None.
func (a Allowed) Resolve(mode Mode) (Policy, error) {
	if mode == "" {
		mode = None
	}
	if mode != None {
		return Policy{}, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("network.mode: %q is not a network mode (known: %q)", mode, None))
	}
	if !slices.Contains(a, mode) {
		return Policy{}, errdefs.ErrPermissionDenied.WithMessage(fmt.Sprintf("network.mode: %q is not allowed by the operator", mode))
	}
	return Policy{Mode: mode}, nil
}
