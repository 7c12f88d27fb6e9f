package fake

import (
	"context"
	"testing"

	"github.com/sandboxd/sandboxd/runtime/runtimetest"
)

// TestContract holds the fake, on which the engine, gRPC and MCP tests
// stand, to the same contract as the real backends.
func TestContract(t *testing.T) {
	rt := New(TestProgram)
	runtimetest.Run(t, runtimetest.Target{
		Runtime: rt,
		Image:   "sandboxd/shell",
		Leftovers: func(_ context.Context, labels map[string]string) ([]string, error) {
			return rt.Labelled(labels), nil
		},
	})
}
