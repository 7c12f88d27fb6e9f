package mcp

import (
	"slices"

	"github.com/google/jsonschema-go/jsonschema"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Hosts validate tool schemas with validators of their own, some of one
// JSON Schema dialect only: the tools' schemas keep to what every host
// accepts (portable).

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

// addTool adds (or replaces) a tool, its schemas made portable.
func addTool[In, Out any](s *Server, t *mcpsdk.Tool, h mcpsdk.ToolHandlerFor[In, Out]) {
	portable(t.InputSchema.(*jsonschema.Schema))
	if out, ok := t.OutputSchema.(*jsonschema.Schema); ok {
		portable(out)
	}
	mcpsdk.AddTool(s.Server, t, h)
}
