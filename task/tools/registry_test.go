package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
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

// changingProvider serves the tools it is given, and says when they
// change, as an MCP server's notifications/tools/list_changed does.
type changingProvider struct {
	mu      sync.Mutex
	tools   []Tool
	err     error
	changed func()
}

func (p *changingProvider) Tools(context.Context) ([]Tool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tools, p.err
}

func (p *changingProvider) Call(context.Context, string, json.RawMessage, string) (json.RawMessage, error) {
	return nil, errors.New("not called")
}

func (p *changingProvider) OnListChanged(f func()) { p.changed = f }

func (p *changingProvider) set(tools []Tool, err error) {
	p.mu.Lock()
	p.tools, p.err = tools, err
	p.mu.Unlock()
	p.changed()
}

// TestToolChangesAreLogged: an operator's log says at INFO when a tool
// provider first lists its tools, which it adds, removes and changes,
// and when it answers again after failing.
func TestToolChangesAreLogged(t *testing.T) {
	var out bytes.Buffer
	r := NewRegistry(slog.New(slog.NewTextHandler(&out, nil)))
	p := &changingProvider{tools: []Tool{{Name: "search", Risk: RiskRead}, {Name: "get", Risk: RiskRead}}}
	if err := r.Add("orders", p); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lines := func() string {
		r.Granted(ctx, []string{"orders.*"})
		s := out.String()
		out.Reset()
		return s
	}
	if got := lines(); !strings.Contains(got, `level=INFO msg="tool provider listed its tools" provider=orders tools=2`) {
		t.Errorf("the first listing: %q", got)
	}
	if got := lines(); got != "" {
		t.Errorf("an unchanged, cached list logged: %q", got)
	}
	p.set([]Tool{{Name: "search", Risk: RiskWrite}, {Name: "cancel", Risk: RiskWrite}}, nil)
	if got := lines(); !strings.Contains(got, `level=INFO msg="tool provider's tools changed" provider=orders added=[cancel] removed=[get] changed=[search]`) {
		t.Errorf("the change: %q", got)
	}
	p.set(nil, errors.New("connection refused"))
	if got := lines(); !strings.Contains(got, `level=WARN msg="tool provider unavailable"`) {
		t.Errorf("the failure: %q", got)
	}
	p.set([]Tool{{Name: "search", Risk: RiskWrite}, {Name: "cancel", Risk: RiskWrite}}, nil)
	if got := lines(); !strings.Contains(got, `level=INFO msg="tool provider answers again" provider=orders tools=2`) || strings.Contains(got, "changed") {
		t.Errorf("the recovery: %q", got)
	}
}
