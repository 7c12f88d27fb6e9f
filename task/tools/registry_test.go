package tools

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSchemasAreResolvedOnce: a schema is resolved once and shared; a bad
// one is refused every time.
func TestSchemasAreResolvedOnce(t *testing.T) {
	raw := json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`)
	a, err := resolve(raw)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := resolve(append(json.RawMessage(nil), raw...)); b != a {
		t.Error("the same schema was resolved twice")
	}
	if c, _ := resolve(json.RawMessage(`{"type":"object"}`)); c == a {
		t.Error("another schema got the first one's resolution")
	}
	for range 2 {
		if _, err := resolve(json.RawMessage(`{"type":"object","properties":{"q":{"$ref":"#/nope"}}}`)); err == nil {
			t.Error("a schema with a dangling $ref resolved")
		}
	}
}

// TestDeclaredToolsAreRefusedByName: a caller's declared tools that a
// program could not call are refused naming the tool and what is wrong,
// in words, not Go's types (the fourth review saw a schema of [1,2] get
// "cannot unmarshal array into Go value of type jsonschema.Schema").
func TestDeclaredToolsAreRefusedByName(t *testing.T) {
	for _, tc := range []struct {
		name string
		tool Tool
		want string
	}{
		{"a schema that is an array", Tool{Name: "x", Risk: RiskRead, InputSchema: json.RawMessage(`[1,2]`)}, "tools[0] (x): input schema: want a JSON Schema, which is an object, not an array"},
		{"a schema that is a string", Tool{Name: "x", Risk: RiskRead, InputSchema: json.RawMessage(`"s"`)}, "not a string"},
		{"a schema that is not JSON", Tool{Name: "x", Risk: RiskRead, InputSchema: json.RawMessage(`{`)}, "input schema is not JSON"},
		{"a name with a dot", Tool{Name: "a.b", Risk: RiskRead}, `tools[0]: name "a.b"`},
		{"no risk", Tool{Name: "x"}, `tools[0] (x): risk ""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateCallerTools([]Tool{tc.tool})
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "Go value") {
				t.Fatalf("ValidateCallerTools() = %v; want an error containing %q", err, tc.want)
			}
		})
	}
	ok := Tool{Name: "add", Risk: RiskRead, InputSchema: json.RawMessage(`{"type":"object"}`)}
	if err := ValidateCallerTools([]Tool{ok}); err != nil {
		t.Fatalf("a sound declaration: %v", err)
	}
}
