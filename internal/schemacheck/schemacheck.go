// Package schemacheck says in words what is wrong with a tool call's
// arguments against its JSON Schema: the argument's path, its value and
// what was wanted ("memory_mb: 100000 is above the maximum 4096"), where a
// validator's message names schema paths and Go types. The MCP server and
// the tool bridge answer with it alike.
package schemacheck

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"
)

// Check checks args, the arguments of tool, against s, and says what is
// wrong with the first argument at fault, or "". A schema's parts it does
// not know (a $ref, a oneOf, a pattern Go's regexp cannot take) it leaves
// to a full validator, which the caller runs too.
func Check(tool string, args any, s *jsonschema.Schema) string {
	return checkValue(tool, "", args, s)
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
