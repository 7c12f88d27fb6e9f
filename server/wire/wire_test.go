package wire

import (
	"testing"
	"time"

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

// TestRunCarriesItsNetworkLog: GetRun's log is the live one while the run
// runs and its result's once it has ended, each event whole; the Go
// client files an ended run's log under its result, as the engine does.
func TestRunCarriesItsNetworkLog(t *testing.T) {
	at := time.Date(2026, 12, 7, 14, 0, 0, 123000000, time.UTC)
	ev := netpolicy.Event{Time: at, Kind: "connect", Name: "a.test", Via: "sni", Port: 443, Addr: "192.0.2.1",
		Allowed: true, Rule: "a.test:443", BytesOut: 10, BytesIn: 20}
	refused := netpolicy.Event{Time: at, Kind: "dns", Name: "b.test", Via: "dns", Reason: "no rule allows b.test"}

	running := RunToProto(run.Info{ID: "r", State: run.Running, Network: run.NetworkEvents([]netpolicy.Event{ev, refused})})
	if len(running.GetNetwork()) != 2 || running.GetNetwork()[1].GetIndex() != 1 {
		t.Fatalf("a running run's log: %v", running.GetNetwork())
	}
	back := RunFromProto(running)
	if len(back.Network) != 2 || !back.Network[0].Event.Equal(ev) || !back.Network[1].Event.Equal(refused) {
		t.Errorf("after the wire: %+v", back.Network)
	}

	sum := netpolicy.Summary{Connections: 1, Denied: 1, BytesOut: 10, BytesIn: 20, Events: []netpolicy.Event{ev, refused}}
	ended := RunToProto(run.Info{ID: "r", State: run.Finished, Result: &run.Result{RunID: "r", Network: &sum}})
	back = RunFromProto(ended)
	if len(ended.GetNetwork()) != 2 || back.Network != nil || back.Result.Network == nil || len(back.Result.Network.Events) != 2 || !back.Result.Network.Events[0].Equal(ev) {
		t.Errorf("an ended run's log: %v -> %+v", ended.GetNetwork(), back.Result.Network)
	}
}
