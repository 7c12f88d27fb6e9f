package schemacheck

import (
	"encoding/json"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
)

// TestPatternsCompileOnceAndNeverPanic: a schema pattern Go's regexp
// cannot take (JSON Schema's are ECMA-262's, lookaheads and all) is left
// to the SDK's validator rather than panicking the check.
func TestPatternsCompileOnceAndNeverPanic(t *testing.T) {
	for _, c := range []struct {
		pattern, v string
		want       bool
	}{{"", "x", true}, {"^[a-z]+$", "abc", true}, {"^[a-z]+$", "ABC", false}, {"^(?=a)a$", "b", true}} {
		for range 2 {
			if got := matches(c.pattern, c.v); got != c.want {
				t.Errorf("matches(%q, %q) = %v", c.pattern, c.v, got)
			}
		}
	}
}

// TestCheckSaysWhatIsWrong: each refusal names the argument's path, its
// value and what was wanted.
func TestCheckSaysWhatIsWrong(t *testing.T) {
	var s jsonschema.Schema
	if err := json.Unmarshal([]byte(`{"type":"object","additionalProperties":false,"required":["a"],
		"properties":{"a":{"type":"integer","minimum":0},"s":{"type":"string","maxLength":3},"e":{"enum":["x","y"]},
		"l":{"type":"array","items":{"type":"string"}}}}`), &s); err != nil {
		t.Fatal(err)
	}
	for args, want := range map[string]string{
		`{"a":"two"}`:           `a: "two" is a string, want a whole number`,
		`{}`:                    `a: is required`,
		`{"a":1,"c":2}`:         `c: is not an argument of caller.add (it takes a, e, l, s)`,
		`{"a":1.5}`:             `a: 1.5 is a number, want a whole number`,
		`{"a":-3}`:              `a: -3 is below the minimum 0`,
		`{"a":1,"s":"toolong"}`: `s: is 7 characters, above the maximum 3`,
		`{"a":1,"e":"z"}`:       `e: "z" is not one of x, y`,
		`{"a":1,"l":["x",2]}`:   `l[1]: 2 is a whole number, want a string`,
		`{"a":1}`:               ``,
	} {
		var v any
		if err := json.Unmarshal([]byte(args), &v); err != nil {
			t.Fatal(err)
		}
		if got := Check("caller.add", v, &s); got != want {
			t.Errorf("Check(%s) = %q, want %q", args, got, want)
		}
	}
}
