package testutil

import (
	"context"
	"encoding/json"
)

// Adder is a caller's tool "add" answered in the test's own process: the
// sum of the call's a and b (tools.Answerer).
type Adder struct{}

// Call answers a call of add.
func (Adder) Call(_ context.Context, _ string, args json.RawMessage, _ string) (json.RawMessage, error) {
	var in struct{ A, B float64 }
	if err := json.Unmarshal(args, &in); err != nil {
		return nil, err
	}
	return json.Marshal(in.A + in.B)
}
