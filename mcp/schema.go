package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/internal/schemacheck"
)

// Hosts validate tool schemas with validators of their own, some of one
// JSON Schema dialect only, and show models what arguments failed in the
// validator's words. The tools' schemas keep to what every host accepts
// (portable), and a call's arguments are checked here first, so that an
// error names the argument and the limit as the API does ("memory_mb:
// 100000 is above the maximum 4096"); the SDK's own validation stays as
// the backstop.

// portable makes s, and the schemas within it, name one type each: a
// list of types with "null" (what a Go pointer or slice yields) is
// refused by single-type dialects, and an argument left out needs none.
func portable(s *jsonschema.Schema) *jsonschema.Schema {
	if s == nil {
		return nil
	}
	if len(s.Types) == 2 && slices.Contains(s.Types, "null") {
		s.Type = s.Types[0]
		if s.Type == "null" {
			s.Type = s.Types[1]
		}
		s.Types = nil
	}
	for _, p := range s.Properties {
		portable(p)
	}
	for _, sub := range []*jsonschema.Schema{s.Items, s.AdditionalProperties, s.PropertyNames} {
		portable(sub)
	}
	return s
}

// argumentChecks holds each tool's input schema for checkArguments.
type argumentChecks struct {
	mu      sync.Mutex
	schemas map[string]*jsonschema.Schema
}

// add makes t's schemas portable and keeps its input schema.
func (a *argumentChecks) add(t *mcpsdk.Tool) {
	in := portable(t.InputSchema.(*jsonschema.Schema))
	if out, ok := t.OutputSchema.(*jsonschema.Schema); ok {
		portable(out)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.schemas == nil {
		a.schemas = map[string]*jsonschema.Schema{}
	}
	a.schemas[t.Name] = in
}

// middleware answers a tools/call whose arguments do not fit its tool's
// schema with a tool error that names the argument, before the SDK's
// validation would in its own words.
func (a *argumentChecks) middleware(next mcpsdk.MethodHandler) mcpsdk.MethodHandler {
	return func(ctx context.Context, method string, req mcpsdk.Request) (mcpsdk.Result, error) {
		call, ok := req.(*mcpsdk.CallToolRequest)
		if !ok || call.Params == nil {
			return next(ctx, method, req)
		}
		a.mu.Lock()
		schema := a.schemas[call.Params.Name]
		a.mu.Unlock()
		if schema == nil {
			return next(ctx, method, req)
		}
		var args any = map[string]any{}
		if len(call.Params.Arguments) > 0 {
			if err := json.Unmarshal(call.Params.Arguments, &args); err != nil {
				return argumentError(req, fmt.Sprintf("arguments: not JSON: %v", err)), nil
			}
		}
		// Hosts and models write null for an argument they leave out.
		if m, ok := args.(map[string]any); ok {
			dropped := false
			for k, v := range m {
				if v == nil && !slices.Contains(schema.Required, k) {
					delete(m, k)
					dropped = true
				}
			}
			if dropped {
				b, err := json.Marshal(m)
				if err != nil {
					return nil, err
				}
				call.Params.Arguments = b
			}
		}
		if msg := schemacheck.Check(call.Params.Name, args, schema); msg != "" {
			return argumentError(req, msg), nil
		}
		return next(ctx, method, req)
	}
}

// argumentError is the result of a call refused for its arguments, as
// the engine's refusals read.
func argumentError(req mcpsdk.Request, msg string) *mcpsdk.CallToolResult {
	var res mcpsdk.CallToolResult
	res.SetError(fmt.Errorf("invalid argument: %s", msg))
	version := statelessVersion // the SDK's assumption without an initialize
	if ss, ok := req.GetSession().(*mcpsdk.ServerSession); ok && ss.InitializeParams() != nil {
		version = ss.InitializeParams().ProtocolVersion
	}
	if version < statelessVersion {
		return &res
	}
	// 2026-07-28 requires a result to say it is complete. The SDK says so
	// of its handlers' results, with a field of its own, which this one
	// comes before: it is set the one way the SDK lets, from JSON.
	b, err := completeResult(&res)
	if err != nil {
		return &res
	}
	var done mcpsdk.CallToolResult
	if json.Unmarshal(b, &done) != nil {
		return &res
	}
	return &done
}
