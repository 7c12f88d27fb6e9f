// Package tools is the tool executor of runs: the tools that sandboxed
// programs may call (a registry of providers' tools), and the six gates
// every call passes, in this order: registry, permission, validation,
// confirmation, idempotency, audit; with the limits of a run's calls and
// the record of each call that its bundle keeps (see docs/tools.md).
package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
)

// Risk is what a call of a tool can do: RiskRead only reads; RiskWrite
// changes something; RiskHigh changes something that must be confirmed,
// call by call, by the run's caller.
type Risk string

const (
	RiskRead  Risk = "read"
	RiskWrite Risk = "write"
	RiskHigh  Risk = "high"
)

// Tool is one tool of a provider.
type Tool struct {
	// Name is the provider's name for it; the registry names it
	// PROVIDER.NAME.
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	Risk        Risk            `json:"risk"`
}

// Provider is a source of tools: an operator's MCP server, or a run's
// caller.
type Provider interface {
	// Tools lists what the provider serves now.
	Tools(ctx context.Context) ([]Tool, error)
	// Call calls tool with args, carrying key (see Key) to the provider
	// so that it can refuse to do a write twice. An error of the tool's
	// own (it ran and failed) is a *Failure.
	Call(ctx context.Context, tool string, args json.RawMessage, key string) (json.RawMessage, error)
}

// ListChanger is a Provider that says when its tools change; the
// registry then lists them again at once rather than when its copy is
// stale.
type ListChanger interface {
	OnListChanged(f func())
}

// Failure is a tool that ran and said it failed.
type Failure struct{ Message string }

func (f *Failure) Error() string { return f.Message }

// Registry is the operator's providers, each under its name.
type Registry struct {
	log       *slog.Logger
	mu        sync.Mutex
	providers map[string]Provider
	// listed caches each provider's tools for listEvery.
	listed map[string]listing
	// seen is what each provider's listings were, kept across a change
	// notification, so that the log can say what changed.
	seen map[string]seenList
}

// seenList is a provider's last good list, and whether a listing after
// it failed; a provider is seen once it listed its tools.
type seenList struct {
	tools  []Tool
	failed bool
}

type listing struct {
	at    time.Time
	tools []Tool
	err   error
}

// listEvery is how long a provider's list of tools is kept.
const listEvery = 30 * time.Second

// NewRegistry makes an empty registry that logs to log (nil: nowhere).
func NewRegistry(log *slog.Logger) *Registry {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Registry{log: log, providers: map[string]Provider{}, listed: map[string]listing{}, seen: map[string]seenList{}}
}

// Add registers p under name, which names its tools NAME.TOOL.
func (r *Registry) Add(name string, p Provider) error {
	if err := ValidName(name); err != nil {
		return err
	}
	if name == CallerProvider {
		return fmt.Errorf("tool provider name %q is the run's caller's", name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.providers[name]; ok {
		return fmt.Errorf("tool provider %q is registered twice", name)
	}
	r.providers[name] = p
	if c, ok := p.(ListChanger); ok {
		c.OnListChanged(func() {
			r.mu.Lock()
			delete(r.listed, name)
			r.mu.Unlock()
		})
	}
	return nil
}

// ValidName refuses a provider name that could not prefix a tool's: it
// is 1 to 64 of a-z, 0-9, _ and -, starting with a letter.
func ValidName(name string) error {
	ok := name != "" && len(name) <= 64 && name[0] >= 'a' && name[0] <= 'z'
	for _, c := range name {
		ok = ok && (c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-')
	}
	if !ok {
		return fmt.Errorf("tool provider name %q: want 1 to 64 of a-z, 0-9, _ and -, starting with a letter", name)
	}
	return nil
}

// Len is how many providers are registered.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.providers)
}

// entry is a registered tool: its full name, its provider, and its
// schema, resolved for validation.
type entry struct {
	Tool
	provider Provider
	schema   *jsonschema.Resolved
}

// has says whether the provider of the tool named PROVIDER.TOOL is
// registered, whether or not it answers.
func (r *Registry) has(name string) bool {
	if r == nil {
		return false
	}
	prov, _, ok := strings.Cut(name, ".")
	r.mu.Lock()
	defer r.mu.Unlock()
	_, found := r.providers[prov]
	return ok && found
}

// lookup finds the tool named PROVIDER.TOOL.
func (r *Registry) lookup(ctx context.Context, name string) (*entry, error) {
	if r == nil {
		return nil, fmt.Errorf("no tool %q is registered", name)
	}
	prov, tool, ok := strings.Cut(name, ".")
	r.mu.Lock()
	p, found := r.providers[prov]
	r.mu.Unlock()
	if !ok || !found {
		return nil, fmt.Errorf("no tool %q is registered", name)
	}
	list, err := r.list(ctx, prov, p)
	if err != nil {
		return nil, err
	}
	return find(name, tool, list, p)
}

// find makes the entry of tool, named name, from a provider's list.
func find(name, tool string, list []Tool, p Provider) (*entry, error) {
	i := slices.IndexFunc(list, func(t Tool) bool { return t.Name == tool })
	if i < 0 {
		return nil, fmt.Errorf("no tool %q is registered", name)
	}
	e := &entry{Tool: list[i], provider: p}
	e.Name = name
	var err error
	if e.schema, err = resolve(e.InputSchema); err != nil {
		return nil, fmt.Errorf("tool %s has a schema that cannot be used: %w", name, err)
	}
	return e, nil
}

// resolve prepares a tool's JSON Schema for validation; a tool without
// one takes any object. A schema is resolved once (about 0.1-0.2 ms, paid
// by every call before) and shared: validation only reads it.
func resolve(raw json.RawMessage) (*jsonschema.Resolved, error) {
	key := string(raw)
	resolvedMu.Lock()
	rs, ok := resolved[key]
	resolvedMu.Unlock()
	if ok {
		return rs, nil
	}
	var s jsonschema.Schema
	if len(raw) == 0 {
		s.Type = "object"
	} else if kind := jsonKind(raw); kind != "an object" {
		return nil, fmt.Errorf("want a JSON Schema, which is an object, not %s", kind)
	} else if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		return nil, err
	}
	resolvedMu.Lock()
	defer resolvedMu.Unlock()
	if len(resolved) >= maxResolved {
		// Providers' schemas change over time: start afresh rather than grow.
		clear(resolved)
	}
	resolved[key] = rs
	return rs, nil
}

// resolved are the schemas resolve has resolved, by their JSON.
var (
	resolvedMu sync.Mutex
	resolved   = map[string]*jsonschema.Resolved{}
)

// maxResolved bounds resolved.
const maxResolved = 1024

// list is p's tools, from the cache while it is fresh.
func (r *Registry) list(ctx context.Context, name string, p Provider) ([]Tool, error) {
	r.mu.Lock()
	l, ok := r.listed[name]
	r.mu.Unlock()
	if ok && time.Since(l.at) < listEvery && l.err == nil {
		return l.tools, nil
	}
	tools, err := p.Tools(ctx)
	if err != nil {
		err = fmt.Errorf("tool provider %s did not list its tools: %w", name, err)
		r.log.Warn("tool provider unavailable", "provider", name, "err", err)
	}
	r.mu.Lock()
	r.listed[name] = listing{at: time.Now(), tools: tools, err: err}
	prev, had := r.seen[name]
	if err != nil {
		if had {
			prev.failed = true
			r.seen[name] = prev
		}
		r.mu.Unlock()
		return nil, err
	}
	r.seen[name] = seenList{tools: tools}
	r.mu.Unlock()
	switch {
	case !had:
		r.log.Info("tool provider listed its tools", "provider", name, "tools", len(tools))
	case prev.failed:
		r.log.Info("tool provider answers again", "provider", name, "tools", len(tools))
	}
	if added, removed, changed := changes(prev.tools, tools); had && len(added)+len(removed)+len(changed) > 0 {
		r.log.Info("tool provider's tools changed", "provider", name, "added", added, "removed", removed, "changed", changed)
	}
	return tools, nil
}

// changes names the tools next adds to prev, removes from it, and
// describes otherwise, each list sorted.
func changes(prev, next []Tool) (added, removed, changed []string) {
	was := map[string]Tool{}
	for _, t := range prev {
		was[t.Name] = t
	}
	for _, t := range next {
		old, ok := was[t.Name]
		switch {
		case !ok:
			added = append(added, t.Name)
		case old.Description != t.Description || old.Risk != t.Risk || !bytes.Equal(old.InputSchema, t.InputSchema):
			changed = append(changed, t.Name)
		}
		delete(was, t.Name)
	}
	removed = slices.Sorted(maps.Keys(was))
	slices.Sort(added)
	slices.Sort(changed)
	return added, removed, changed
}

// Granted lists the tools whose names match one of patterns, by name.
// A provider that cannot list its tools is left out.
func (r *Registry) Granted(ctx context.Context, patterns []string) []Tool {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	names := make([]string, 0, len(r.providers))
	for n := range r.providers {
		names = append(names, n)
	}
	r.mu.Unlock()
	slices.Sort(names)
	var out []Tool
	for _, n := range names {
		r.mu.Lock()
		p := r.providers[n]
		r.mu.Unlock()
		list, err := r.list(ctx, n, p)
		if err != nil {
			continue
		}
		for _, t := range list {
			t.Name = n + "." + t.Name
			if Matches(patterns, t.Name) {
				out = append(out, t)
			}
		}
	}
	return out
}

// Matches says whether name matches one of patterns: "orders.search",
// "orders.*", "*".
func Matches(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, err := path.Match(p, name); err == nil && ok {
			return true
		}
	}
	return false
}

// ValidPattern refuses a pattern that could never match.
func ValidPattern(p string) error {
	if _, err := path.Match(p, ""); err != nil || p == "" {
		return errors.New("tool pattern " + fmt.Sprintf("%q", p) + ": want a tool's name or a pattern such as orders.* or *")
	}
	return nil
}

// jsonKind names the kind of the JSON value raw ("an object", "an array",
// ...), for an error that says what was given instead of a Go type.
func jsonKind(raw json.RawMessage) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "JSON"
	}
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "null"
}
