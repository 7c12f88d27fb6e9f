package mcp

import (
	"context"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
)

// countRequests counts the JSON-RPC requests s receives, by method, tool
// and outcome, in reg: the HTTP counters see only POSTs, not what they ask.
func countRequests(s *mcpsdk.Server, reg prometheus.Registerer) error {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandboxd_mcp_requests_total",
		Help: "MCP requests, by JSON-RPC method, tool (for tools/call) and outcome: ok, tool_error (a result the model reads as failed) or error (a JSON-RPC error).",
	}, []string{"method", "tool", "outcome"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sandboxd_mcp_request_duration_seconds",
		Help:    "Time to answer MCP requests, by JSON-RPC method.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
	}, []string{"method"})
	for _, c := range []prometheus.Collector{requests, duration} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	s.AddReceivingMiddleware(func(next mcpsdk.MethodHandler) mcpsdk.MethodHandler {
		return func(ctx context.Context, method string, req mcpsdk.Request) (mcpsdk.Result, error) {
			start := time.Now()
			res, err := next(ctx, method, req)
			tool, outcome := "", "ok"
			if call, ok := req.(*mcpsdk.CallToolRequest); ok && call.Params != nil {
				tool = call.Params.Name
			}
			if r, ok := res.(*mcpsdk.CallToolResult); ok && r != nil && r.IsError {
				outcome = "tool_error"
			}
			if err != nil {
				outcome = "error"
			}
			requests.WithLabelValues(method, tool, outcome).Inc()
			duration.WithLabelValues(method).Observe(time.Since(start).Seconds())
			return res, err
		}
	})
	return nil
}
