// Package toolserver is a real MCP server for the tests of the tool
// bridge (see task/tools): an orders service with a read tool, a
// high-risk write tool that does each idempotency key's write once, a
// tool that fails and one that is slow, served over Streamable HTTP on
// loopback.
package toolserver

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// KeyMeta is where sandboxd puts a call's idempotency key (mcp.KeyMeta).
const KeyMeta = "io.sandboxd/idempotency-key"

// Server is a running orders server.
type Server struct {
	// URL is its Streamable HTTP endpoint.
	URL string

	http *httptest.Server
	srv  *mcpsdk.Server

	mu      sync.Mutex
	refunds map[string]string // idempotency key: refunded order
	writes  int
	header  string // the Authorization of the last request
}

// Start serves the orders server over Streamable HTTP until the test
// ends.
func Start(t testing.TB) *Server {
	s := &Server{refunds: map[string]string{}}
	srv := s.mcpServer()
	s.srv = srv
	h := mcpsdk.NewStreamableHTTPHandler(func(*http.Request) *mcpsdk.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.header = r.Header.Get("Authorization")
		s.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	s.URL, s.http = hs.URL, hs
	return s
}

// ServeStdio serves the orders server on stdin and stdout until the
// client closes them: an operator's tool server started as a command.
func ServeStdio(ctx context.Context) error {
	s := &Server{refunds: map[string]string{}}
	return s.mcpServer().Run(ctx, &mcpsdk.StdioTransport{})
}

// Stop ends the server before the test does: a replay must not need it.
func (s *Server) Stop() {
	s.http.CloseClientConnections()
	s.http.Close()
}

// AddTool adds a read-only tool name that answers "ok": the server tells
// its clients that its tools changed.
func (s *Server) AddTool(name string) {
	s.srv.AddTool(&mcpsdk.Tool{
		Name: name, Description: "Added while serving.", Annotations: &mcpsdk.ToolAnnotations{ReadOnlyHint: true},
		InputSchema: json.RawMessage(`{"type":"object"}`),
	}, func(context.Context, *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
		return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: "ok"}}}, nil
	})
}

// Writes is how many refunds the server did.
func (s *Server) Writes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

// Authorization is the header of the last request.
func (s *Server) Authorization() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.header
}

// mcpServer is the orders server's MCP server, whose writes s counts.
func (s *Server) mcpServer() *mcpsdk.Server {
	srv := mcpsdk.NewServer(&mcpsdk.Implementation{Name: "orders", Version: "1"}, nil)
	yes, no := true, false
	srv.AddTool(&mcpsdk.Tool{
		Name: "search", Description: "Find orders whose text matches query.\nMore lines that a listing leaves out.",
		Annotations: &mcpsdk.ToolAnnotations{ReadOnlyHint: true},
		InputSchema: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string","description":"words to look for"},"limit":{"type":"integer","minimum":1,"maximum":50}},"required":["query"],"additionalProperties":false}`),
	}, func(_ context.Context, req *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
		var in struct {
			Query string `json:"query"`
			Limit int    `json:"limit"`
		}
		_ = json.Unmarshal(req.Params.Arguments, &in)
		orders := []map[string]any{{"id": "A-1", "query": in.Query, "total": 42.5}, {"id": "A-2", "query": in.Query, "total": 7}}
		if in.Limit > 0 && in.Limit < len(orders) {
			orders = orders[:in.Limit]
		}
		return &mcpsdk.CallToolResult{StructuredContent: map[string]any{"orders": orders}}, nil
	})
	srv.AddTool(&mcpsdk.Tool{
		Name: "refund", Description: "Refund an order.",
		Annotations: &mcpsdk.ToolAnnotations{DestructiveHint: &yes},
		InputSchema: json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"},"api_key":{"type":"string","writeOnly":true}},"required":["order_id"]}`),
	}, func(_ context.Context, req *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
		var in struct {
			OrderID string `json:"order_id"`
		}
		_ = json.Unmarshal(req.Params.Arguments, &in)
		key, _ := req.Params.Meta[KeyMeta].(string)
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, done := s.refunds[key]; !done || key == "" {
			s.writes++
			s.refunds[key] = in.OrderID
		}
		return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: "refunded " + s.refunds[key]}}}, nil
	})
	srv.AddTool(&mcpsdk.Tool{
		Name: "note", Description: "Add a note to an order.",
		Annotations: &mcpsdk.ToolAnnotations{DestructiveHint: &no},
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`),
	}, func(context.Context, *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
		return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: "noted"}}}, nil
	})
	srv.AddTool(&mcpsdk.Tool{
		Name: "fail", Description: "Always fails.", Annotations: &mcpsdk.ToolAnnotations{ReadOnlyHint: true},
		InputSchema: json.RawMessage(`{"type":"object"}`),
	}, func(context.Context, *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
		return &mcpsdk.CallToolResult{IsError: true, Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: "the warehouse is closed"}}}, nil
	})
	srv.AddTool(&mcpsdk.Tool{
		Name: "slow", Description: "Answers after seconds.", Annotations: &mcpsdk.ToolAnnotations{ReadOnlyHint: true},
		InputSchema: json.RawMessage(`{"type":"object","properties":{"seconds":{"type":"number"}}}`),
	}, func(ctx context.Context, req *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
		var in struct {
			Seconds float64 `json:"seconds"`
		}
		_ = json.Unmarshal(req.Params.Arguments, &in)
		select {
		case <-time.After(time.Duration(in.Seconds * float64(time.Second))):
		case <-ctx.Done():
		}
		return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: "done"}}}, nil
	})
	return srv
}
