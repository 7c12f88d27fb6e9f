package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
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
		if msg := checkValue(call.Params.Name, "", args, schema); msg != "" {
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

// checkValue checks v, the argument of tool at path ("" for all of them),
// against s, and says what is wrong in the API's words, or "".
func checkValue(tool, path string, v any, s *jsonschema.Schema) string {
	name := path
	if name == "" {
		name = "arguments"
	}
	if s.Type != "" && !isType(v, s.Type) {
		return fmt.Sprintf("%s: %s is %s, want %s", name, show(v), article(kind(v)), article(s.Type))
	}
	if len(s.Enum) > 0 && !slices.ContainsFunc(s.Enum, func(e any) bool { return fmt.Sprint(e) == fmt.Sprint(v) }) {
		var names []string
		for _, e := range s.Enum {
			names = append(names, fmt.Sprint(e))
		}
		return fmt.Sprintf("%s: %s is not one of %s", name, show(v), strings.Join(names, ", "))
	}
	switch v := v.(type) {
	case float64:
		switch {
		case s.Maximum != nil && v > *s.Maximum:
			return fmt.Sprintf("%s: %s is above the maximum %s", name, show(v), show(*s.Maximum))
		case s.Minimum != nil && v < *s.Minimum:
			return fmt.Sprintf("%s: %s is below the minimum %s", name, show(v), show(*s.Minimum))
		case s.Type == "integer" && v != math.Trunc(v):
			return fmt.Sprintf("%s: %s is not a whole number", name, show(v))
		}
	case string:
		n := len([]rune(v))
		switch {
		case s.MinLength != nil && n < *s.MinLength:
			return fmt.Sprintf("%s: must not be empty", name)
		case s.MaxLength != nil && n > *s.MaxLength:
			return fmt.Sprintf("%s: is %d characters, above the maximum %d", name, n, *s.MaxLength)
		case !matches(s.Pattern, v):
			return fmt.Sprintf("%s: %s does not match %s", name, show(v), s.Pattern)
		}
	case []any:
		switch {
		case s.MinItems != nil && len(v) < *s.MinItems:
			return fmt.Sprintf("%s: needs at least %d item(s)", name, *s.MinItems)
		case s.MaxItems != nil && len(v) > *s.MaxItems:
			return fmt.Sprintf("%s: has %d items, above the maximum %d", name, len(v), *s.MaxItems)
		}
		if s.Items != nil {
			for i, item := range v {
				if msg := checkValue(tool, fmt.Sprintf("%s[%d]", path, i), item, s.Items); msg != "" {
					return msg
				}
			}
		}
	case map[string]any:
		return checkObject(tool, path, v, s)
	}
	return ""
}

// checkObject checks an object's properties: required, known, and each
// against its schema, in the schema's order of names.
func checkObject(tool, path string, v map[string]any, s *jsonschema.Schema) string {
	at := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	for _, k := range s.Required {
		if _, ok := v[k]; !ok {
			return at(k) + ": is required"
		}
	}
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		prop, known := s.Properties[k]
		switch {
		case known:
			if msg := checkValue(tool, at(k), v[k], prop); msg != "" {
				return msg
			}
		case s.AdditionalProperties != nil && isFalse(s.AdditionalProperties):
			names := make([]string, 0, len(s.Properties))
			for n := range s.Properties {
				names = append(names, n)
			}
			slices.Sort(names)
			where := tool
			if path != "" {
				where = path
			}
			return fmt.Sprintf("%s: is not an argument of %s (it takes %s)", at(k), where, strings.Join(names, ", "))
		case s.AdditionalProperties != nil:
			if msg := checkValue(tool, at(k), v[k], s.AdditionalProperties); msg != "" {
				return msg
			}
		}
		if s.PropertyNames != nil && !matches(s.PropertyNames.Pattern, k) {
			where := path
			if where == "" {
				where = "arguments"
			}
			return fmt.Sprintf("%s: the name %q does not match %s", where, k, s.PropertyNames.Pattern)
		}
	}
	return ""
}

// isFalse says s is the schema false, which allows nothing.
func isFalse(s *jsonschema.Schema) bool {
	return s.Not != nil && s.Not.Type == "" && len(s.Not.Types) == 0 && s.Not.Properties == nil
}

// kind is v's JSON type, as a schema names it: "integer" for a whole
// number.
func kind(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case bool:
		return "boolean"
	case float64:
		if v == math.Trunc(v) {
			return "integer"
		}
		return "number"
	}
	return fmt.Sprintf("%T", v)
}

func isType(v any, typ string) bool {
	k := kind(v)
	return k == typ || typ == "number" && k == "integer"
}

// article names a JSON type for a reader.
func article(typ string) string {
	switch typ {
	case "object":
		return "an object"
	case "array":
		return "a list"
	case "integer":
		return "a whole number"
	case "null":
		return "null"
	}
	return "a " + typ
}

// show is v as the caller wrote it, cut short when long.
func show(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 40 {
		return string(b[:37]) + "..."
	}
	return string(b)
}

// patterns are the schemas' patterns, compiled once.
var patterns sync.Map // pattern -> *regexp.Regexp, or nil when Go cannot compile it

// matches reports whether v matches pattern; an empty pattern, or one Go's
// regexp cannot take (JSON Schema's is ECMA-262's), is left to the SDK's
// validator.
func matches(pattern, v string) bool {
	if pattern == "" {
		return true
	}
	re, ok := patterns.Load(pattern)
	if !ok {
		compiled, err := regexp.Compile(pattern)
		if err != nil {
			compiled = nil
		}
		re, _ = patterns.LoadOrStore(pattern, compiled)
	}
	return re.(*regexp.Regexp) == nil || re.(*regexp.Regexp).MatchString(v)
}
