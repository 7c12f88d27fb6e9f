package main

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/docker/go-units"
	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"

	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/hostuid"
)

// parseError turns a flag error, which the flag set has already printed
// with the usage, into exit code 2; -h exits 0.
func parseError(fs *flag.FlagSet, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	if hint := flagHint(fs, err); hint != "" {
		fmt.Fprintln(fs.Output(), hint)
	}
	return exitError{2}
}

// flagHint is "did you mean --NAME?" when err is fs's refusal of a flag it
// lacks and one of its flags is close to it; empty otherwise.
func flagHint(fs *flag.FlagSet, err error) string {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if !ok {
		return ""
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	if near := closest(name, names); near != "" {
		return "did you mean --" + near + "?"
	}
	return ""
}

// closest is the one of names that word most likely meant: the only one
// that begins with word or that word begins with (--language for
// --lang), or else the nearest within a third of word's length in edits;
// empty when none is.
func closest(word string, names []string) string {
	var prefixed []string
	for _, n := range names {
		if strings.HasPrefix(n, word) || len(n) >= 3 && strings.HasPrefix(word, n) {
			prefixed = append(prefixed, n)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	best, bestDist := "", max(1, len(word)/3)+1
	for _, n := range names {
		if d := editDistance(word, n); d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// parseInterspersed parses flags that may come before, between or after
// the positional arguments, which it returns; "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, parseError(fs, err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// stringsFlag collects a repeatable flag.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

// byteSize is a flag for sizes such as 512MiB, 1g or 1048576.
type byteSize int64

func (b *byteSize) String() string { return units.BytesSize(float64(*b)) }

func (b *byteSize) Set(s string) error {
	n, err := units.RAMInBytes(s)
	if err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("%q is negative", s)
	}
	*b = byteSize(n)
	return nil
}

// seedFlag is an optional uint64.
type seedFlag struct{ v *uint64 }

func (s *seedFlag) String() string {
	if s == nil || s.v == nil {
		return ""
	}
	return strconv.FormatUint(*s.v, 10)
}

func (s *seedFlag) Set(v string) error {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return err
	}
	s.v = &n
	return nil
}

// mountsValue collects NAME=/host/folder pairs into the task config.
type mountsValue struct{ t *task.Config }

func mountFlag(t *task.Config) *mountsValue { return &mountsValue{t} }

func (m *mountsValue) String() string {
	if m == nil || m.t == nil {
		return ""
	}
	var pairs []string
	for k, v := range m.t.Mounts {
		pairs = append(pairs, k+"="+v)
	}
	sort.Strings(pairs)
	return strings.Join(pairs, ",")
}

func (m *mountsValue) Set(s string) error {
	name, dir, ok := strings.Cut(s, "=")
	if !ok || name == "" || dir == "" {
		return fmt.Errorf("%q is not NAME=/host/folder", s)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a folder", dir)
	}
	if m.t.Mounts == nil {
		m.t.Mounts = map[string]string{}
	}
	if _, dup := m.t.Mounts[name]; dup {
		return fmt.Errorf("mount %q is given twice", name)
	}
	m.t.Mounts[name] = dir
	return nil
}

// uidRangeFlag is FIRST:COUNT.
type uidRangeFlag hostuid.Range

func (u *uidRangeFlag) String() string { return hostuid.Range(*u).String() }

func (u *uidRangeFlag) Set(s string) error {
	r, err := hostuid.ParseRange(s)
	if err != nil {
		return err
	}
	*u = uidRangeFlag(r)
	return nil
}

// optionsEnv holds flags as on the command line, for where a file is
// awkward (a container's environment): NODE_OPTIONS's idea, one variable
// for every flag, with no name of its own to clash with the clients'.
const optionsEnv = "SANDBOXD_OPTIONS"

// parseSettings parses a command's flags from, in order, the file that
// --config names, $SANDBOXD_OPTIONS, and the command line, so that the
// command line has the last word. The file and the variable hold flags as
// on the command line, quoted as a shell quotes, any number per line; #
// starts a comment. It is how the daemon and an in-process engine share
// one configuration.
func parseSettings(fs *flag.FlagSet, args []string) error {
	var path string
	fs.StringVar(&path, "config", "", "a file of flags, quoted as in a shell, read before $"+optionsEnv+" and the command line (# starts a comment)")
	// Find --config first, without the rest, which it may override.
	for i, a := range args {
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != "config" || !strings.HasPrefix(a, "-") {
			continue
		}
		if !hasValue && i+1 < len(args) {
			value = args[i+1]
		}
		path = value
	}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("--config: %w", err)
		}
		if err := parseShellFlags(fs, path, string(b)); err != nil {
			return fmt.Errorf("--config %w", err)
		}
	}
	if env := os.Getenv(optionsEnv); strings.TrimSpace(env) != "" {
		if err := parseShellFlags(fs, "$"+optionsEnv, env); err != nil {
			return err
		}
	}
	if err := fs.Parse(args); err != nil {
		return parseError(fs, err)
	}
	return nil
}

// parseShellFlags parses text, named name, as a shell would read the words
// of its commands, and each command's words as flags; an error names
// name:line. Nothing is expanded: a $, a ` or a glob that a shell would
// expand is refused, so that a file means the same wherever it is read.
func parseShellFlags(fs *flag.FlagSet, name, text string) error {
	f, err := syntax.NewParser(syntax.Variant(syntax.LangPOSIX)).Parse(strings.NewReader(text), name)
	if err != nil {
		return err
	}
	for _, st := range f.Stmts {
		at := fmt.Sprintf("%s:%d", name, st.Pos().Line())
		call, ok := st.Cmd.(*syntax.CallExpr)
		if !ok || len(call.Assigns) > 0 || len(st.Redirs) > 0 || st.Negated || st.Background || st.Coprocess {
			return fmt.Errorf("%s: want flags such as --name=value, not shell syntax (quote a value that holds ; & | < > ( ) or =)", at)
		}
		words := make([]string, 0, len(call.Args))
		for _, w := range call.Args {
			if p := expansion(w); p != nil {
				return fmt.Errorf("%s:%d: %s is not expanded here: put it in single quotes to mean it as written", name, p.Pos().Line(), text[p.Pos().Offset():p.End().Offset()])
			}
			// With nothing to expand, a word is one field, its quotes and
			// escapes removed.
			v, err := expand.Fields(nil, w)
			if err != nil {
				return fmt.Errorf("%s: %w", at, err)
			}
			words = append(words, v...)
		}
		if err := parseOnlyFlags(fs, words); err != nil {
			return fmt.Errorf("%s: %w", at, err)
		}
	}
	return nil
}

// expansion is the first part of w that a shell would expand, or nil.
// Globs are not among them: a word is read as one value, never a list of
// files, as a shell leaves a pattern that matches nothing.
func expansion(w *syntax.Word) syntax.Node {
	var found syntax.Node
	syntax.Walk(w, func(n syntax.Node) bool {
		switch n.(type) {
		case *syntax.ParamExp, *syntax.CmdSubst, *syntax.ArithmExp, *syntax.ProcSubst, *syntax.ExtGlob, *syntax.BraceExp:
			if found == nil {
				found = n
			}
		}
		return found == nil
	})
	if lit, ok := w.Parts[0].(*syntax.Lit); found == nil && ok && strings.HasPrefix(lit.Value, "~") {
		found = lit
	}
	return found
}

// parseOnlyFlags parses args, which must all be flags.
func parseOnlyFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if hint := flagHint(fs, err); hint != "" {
			return fmt.Errorf("%w; %s", err, hint)
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%q is not a flag", fs.Args())
	}
	return nil
}

// rulesFlag collects --egress-allow rules.
type rulesFlag []netpolicy.Rule

func (r *rulesFlag) String() string {
	var parts []string
	for _, rule := range *r {
		parts = append(parts, rule.String())
	}
	return strings.Join(parts, ";")
}

func (r *rulesFlag) Set(s string) error {
	rule, err := netpolicy.ParseRule(s)
	if err != nil {
		return err
	}
	*r = append(*r, rule)
	return nil
}

// policiesFlag collects NAME=RULE;RULE... named policies.
type policiesFlag map[string][]netpolicy.Rule

func (p *policiesFlag) String() string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(*p)) {
		r := rulesFlag((*p)[name])
		parts = append(parts, name+"="+r.String())
	}
	return strings.Join(parts, " ")
}

func (p *policiesFlag) Set(s string) error {
	name, list, ok := strings.Cut(s, "=")
	if !ok || name == "" || list == "" {
		return fmt.Errorf("%q is not NAME=RULE;RULE (rules separated by semicolons)", s)
	}
	if _, dup := (*p)[name]; dup {
		return fmt.Errorf("policy %q is given twice", name)
	}
	var rules rulesFlag
	for _, r := range strings.Split(list, ";") {
		if err := rules.Set(strings.TrimSpace(r)); err != nil {
			return err
		}
	}
	if *p == nil {
		*p = map[string][]netpolicy.Rule{}
	}
	(*p)[name] = rules
	return nil
}

// hostsFlag collects NAME=ADDRESS pairs the gateway resolves itself.
type hostsFlag map[string]netip.Addr

func (h *hostsFlag) String() string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(*h)) {
		parts = append(parts, name+"="+(*h)[name].String())
	}
	return strings.Join(parts, ",")
}

func (h *hostsFlag) Set(s string) error {
	name, addr, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return fmt.Errorf("%q is not NAME=ADDRESS", s)
	}
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return fmt.Errorf("%q: %w", s, err)
	}
	if *h == nil {
		*h = map[string]netip.Addr{}
	}
	(*h)[strings.ToLower(name)] = a
	return nil
}

// prefixFlag is an address range.
type prefixFlag netip.Prefix

func (p *prefixFlag) String() string { return netip.Prefix(*p).String() }

func (p *prefixFlag) Set(s string) error {
	v, err := netip.ParsePrefix(s)
	if err != nil {
		return err
	}
	*p = prefixFlag(v)
	return nil
}
