package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// CallerProvider names the tools a run's caller declares with the run:
// a program calls them as caller.NAME, and the caller answers each call
// itself (see docs/tools.md). No operator's server can take the name.
const CallerProvider = "caller"

// CallerSide is what a run's caller brings to its tool channel: its own
// tools and their provider (the caller, on the run's stream), and a
// Confirmer for high-risk calls. Either may be missing.
type CallerSide struct {
	Tools     []Tool
	Provider  Answerer
	Confirmer Confirmer
}

// Answerer runs the caller's tools: Provider's Call.
type Answerer interface {
	Call(ctx context.Context, tool string, args json.RawMessage, key string) (json.RawMessage, error)
}

// Bounds of the tools a caller declares.
const (
	maxCallerTools       = 64
	maxDescriptionBytes  = 4 << 10
	maxSchemaBytes       = 64 << 10
	callerToolNameLength = 64
)

// ValidateCallerTools refuses declared tools that a program could not
// call, naming the tool and what is wrong.
func ValidateCallerTools(list []Tool) error {
	if len(list) > maxCallerTools {
		return fmt.Errorf("tools: %d declared, above the limit of %d", len(list), maxCallerTools)
	}
	seen := map[string]bool{}
	for i, t := range list {
		where := fmt.Sprintf("tools[%d]", i)
		ok := t.Name != "" && len(t.Name) <= callerToolNameLength && (t.Name[0] < '0' || t.Name[0] > '9')
		for _, c := range t.Name {
			ok = ok && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_')
		}
		switch {
		case !ok:
			return fmt.Errorf("%s: name %q: want 1 to %d of letters, digits and _, not starting with a digit", where, t.Name, callerToolNameLength)
		case seen[t.Name]:
			return fmt.Errorf("%s: %q is declared twice", where, t.Name)
		case len(t.Description) > maxDescriptionBytes:
			return fmt.Errorf("%s (%s): description of %d bytes, above the limit of %d", where, t.Name, len(t.Description), maxDescriptionBytes)
		case len(t.InputSchema) > maxSchemaBytes:
			return fmt.Errorf("%s (%s): input schema of %d bytes, above the limit of %d", where, t.Name, len(t.InputSchema), maxSchemaBytes)
		case t.Risk != RiskRead && t.Risk != RiskWrite && t.Risk != RiskHigh:
			return fmt.Errorf("%s (%s): risk %q: want read, write or high", where, t.Name, t.Risk)
		}
		seen[t.Name] = true
		if len(t.InputSchema) > 0 && !json.Valid(t.InputSchema) {
			return fmt.Errorf("%s (%s): input schema is not JSON", where, t.Name)
		}
		if _, err := resolve(t.InputSchema); err != nil {
			return fmt.Errorf("%s (%s): input schema: %v", where, t.Name, err)
		}
	}
	return nil
}

// CallerToolNames are the names a program calls declared tools by.
func CallerToolNames(list []Tool) []string {
	out := make([]string, len(list))
	for i, t := range list {
		out[i] = CallerProvider + "." + t.Name
	}
	return out
}

// isCallers says whether name is one of the caller's tools.
func isCallers(name string) bool { return strings.HasPrefix(name, CallerProvider+".") }

// callerTools is a provider serving a fixed list, the caller's.
type callerTools struct {
	CallerSide
}

func (c callerTools) Tools(context.Context) ([]Tool, error) { return c.CallerSide.Tools, nil }
func (c callerTools) Call(ctx context.Context, tool string, args json.RawMessage, key string) (json.RawMessage, error) {
	return c.Provider.Call(ctx, tool, args, key)
}
