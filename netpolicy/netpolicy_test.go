package netpolicy

import (
	"testing"

	"github.com/containerd/errdefs"
)

func TestResolve(t *testing.T) {
	allowed := Allowed{None}
	if p, err := allowed.Resolve(""); err != nil || p.Mode != None {
		t.Fatalf("Resolve(\"\") = %+v, %v; want none by default", p, err)
	}
	if p, err := allowed.Resolve(None); err != nil || p.Mode != None {
		t.Fatalf("Resolve(none) = %+v, %v", p, err)
	}
	if _, err := allowed.Resolve("host"); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("Resolve(host) = %v, want invalid argument", err)
	}
	if _, err := (Allowed{}).Resolve(None); !errdefs.IsPermissionDenied(err) {
		t.Fatalf("Resolve(none) when the operator allows nothing = %v, want permission denied", err)
	}
}
