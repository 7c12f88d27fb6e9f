package tools

import (
	"encoding/json"
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
