package wire

import (
	"testing"

	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/task/run"
)

// TestResultCarriesTheNetworkBothWays: what an allow-listed run's network
// did (its counts and bytes) survives the wire to the Go client; the
// decisions themselves are the bundle's, not the result's.
func TestResultCarriesTheNetworkBothWays(t *testing.T) {
	sum := &netpolicy.Summary{Connections: 3, Denied: 1, BytesOut: 132, BytesIn: 208,
		Events: []netpolicy.Event{{Kind: "connect", Name: "a.test", Allowed: true}}}
	got := ResultFromProto(ResultToProto(run.Result{RunID: "r", Status: run.StatusOK, Network: sum}))
	want := netpolicy.Summary{Connections: 3, Denied: 1, BytesOut: 132, BytesIn: 208}
	if got.Network == nil || got.Network.Connections != want.Connections || got.Network.Denied != want.Denied ||
		got.Network.BytesOut != want.BytesOut || got.Network.BytesIn != want.BytesIn || len(got.Network.Events) != 0 {
		t.Errorf("network after the wire: %+v, want %+v", got.Network, want)
	}
	if got := ResultFromProto(ResultToProto(run.Result{RunID: "r", Status: run.StatusOK})); got.Network != nil {
		t.Errorf("a run without network came back with %+v", got.Network)
	}
}
