package main

import (
	"context"
	"testing"

	"google.golang.org/grpc"
)

// TestGRPCHistogramsOptOut: --grpc-histograms=false drops the gRPC
// latency histograms and keeps the call counters.
func TestGRPCHistogramsOptOut(t *testing.T) {
	for _, histograms := range []bool{true, false} {
		reg, m := newMetrics(histograms)
		// One call through the interceptor, so that its series exist.
		_, _ = m.UnaryServerInterceptor()(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/sandboxd.v1.Sandbox/Ping"},
			func(context.Context, any) (any, error) { return nil, nil })
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, f := range families {
			names[f.GetName()] = true
		}
		if !names["grpc_server_handled_total"] || names["grpc_server_handling_seconds"] != histograms {
			t.Errorf("histograms %v: handled_total %v, handling_seconds %v", histograms, names["grpc_server_handled_total"], names["grpc_server_handling_seconds"])
		}
	}
}
