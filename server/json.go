package server

import (
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/server/wire"
	"github.com/sandboxd/sandboxd/task/judge"
	"github.com/sandboxd/sandboxd/task/run"
)

// The API's JSON of a run's events, as grpcurl prints them, for clients
// that print events for machines.

// StartedJSON is the JSON of a started event.
func StartedJSON(s run.Started) ([]byte, error) {
	return eventJSON(&pb.RunEvent{Event: &pb.RunEvent_Started{Started: wire.StartedToProto(s)}})
}

// OutputJSON is the JSON of an output event.
func OutputJSON(s run.Stream, p []byte) ([]byte, error) {
	if s == run.Stderr {
		return eventJSON(&pb.RunEvent{Event: &pb.RunEvent_Stderr{Stderr: p}})
	}
	return eventJSON(&pb.RunEvent{Event: &pb.RunEvent_Stdout{Stdout: p}})
}

// NetworkJSON is the JSON of a network event.
func NetworkJSON(ev run.NetworkEvent) ([]byte, error) {
	return eventJSON(&pb.RunEvent{Event: &pb.RunEvent_Network{Network: wire.NetworkEventToProto(ev)}})
}

// ResultJSON is the JSON of a result event.
func ResultJSON(r run.Result) ([]byte, error) {
	return eventJSON(&pb.RunEvent{Event: &pb.RunEvent_Result{Result: wire.ResultToProto(r)}})
}

func eventJSON(ev *pb.RunEvent) ([]byte, error) { return protojson.Marshal(ev) }

// JudgementJSON is the JSON of a judgement, as the API spells it.
func JudgementJSON(j judge.Judgement) ([]byte, error) {
	return protojson.MarshalOptions{EmitDefaultValues: true}.Marshal(wire.JudgementToProto(j))
}
