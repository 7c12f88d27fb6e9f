package run

import "github.com/sandboxd/sandboxd/netpolicy"

// Stream names an output stream.
type Stream int

// The output streams of a program.
const (
	Stdout Stream = 1
	Stderr Stream = 2
)

func (s Stream) String() string {
	if s == Stderr {
		return "stderr"
	}
	return "stdout"
}

// Observer receives a run's events as they happen, one call at a time. An
// error from it means the caller is gone: the run is cancelled.
type Observer interface {
	// Started is called once, when the container runs.
	Started(Started) error
	// Output is called with each chunk of output up to the stream's cap.
	// p is valid only during the call.
	Output(s Stream, p []byte) error
}

// NetworkEvent is a decision of the egress gateway for an allow-listed
// run, as it now stands, and its place in the run's log.
type NetworkEvent struct {
	Index int
	netpolicy.Event
}

// NetworkObserver is an Observer that follows the run's network as it
// happens: each decision when it is made, and again with the same index
// when its connection ends (its bytes) or is cut. Calls come one at a
// time, in order with the others.
type NetworkObserver interface {
	Observer
	Network(NetworkEvent) error
}

// ForwardNetwork passes ev to obs if it follows the network: what an
// Observer that wraps another does with it.
func ForwardNetwork(obs Observer, ev NetworkEvent) error {
	if n, ok := obs.(NetworkObserver); ok {
		return n.Network(ev)
	}
	return nil
}

// NetworkEvents numbers a log's events as NetworkEvents.
func NetworkEvents(events []netpolicy.Event) []NetworkEvent {
	out := make([]NetworkEvent, len(events))
	for i, e := range events {
		out[i] = NetworkEvent{Index: i, Event: e}
	}
	return out
}
