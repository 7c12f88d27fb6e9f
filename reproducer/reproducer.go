// Package reproducer replays the request recorded in a bundle and reports,
// entry by entry, what reproduced and what differed: status, exit code,
// stdout, stderr and every output file, with a short unified diff for text.
// It knows no protocol: the caller supplies a Runner that runs the request
// again and returns the new bundle.
package reproducer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/tools"
)

// Recorded is a verified bundle with the content of its entries.
type Recorded struct {
	Bundle  *artifacts.Bundle
	Entries map[string][]byte
}

// Manifest is the bundle's manifest.
func (r *Recorded) Manifest() *artifacts.Manifest { return &r.Bundle.Manifest }

// Load verifies the bundle read from rd (against want, when not empty) and
// keeps its entries. Nothing it read is kept unless all of it verified.
func Load(rd io.Reader, want string, lim artifacts.ReadLimits) (*Recorded, error) {
	entries := map[string][]byte{}
	b, err := artifacts.Verify(rd, want, lim, func(p string, content io.Reader) error {
		data, err := io.ReadAll(content)
		entries[p] = data
		return err
	})
	if err != nil {
		return nil, err
	}
	return &Recorded{Bundle: b, Entries: entries}, nil
}

// LoadFile loads a bundle file. A file named HEX.tar.zst, as the store names
// them, is also checked against the digest its name gives.
func LoadFile(name string, lim artifacts.ReadLimits) (*Recorded, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Load(f, DigestFromName(name), lim)
}

// DigestFromName returns the digest a store file name gives, or "".
func DigestFromName(name string) string {
	base := strings.TrimSuffix(path.Base(name), ".tar.zst")
	base = strings.TrimPrefix(base, "sha256-")
	if d := "sha256:" + base; len(base) == 64 {
		if _, err := artifacts.ParseDigest(d); err == nil {
			return d
		}
	}
	return ""
}

// Request rebuilds the recorded request from the manifest and entries: the
// same program or command, options and limits, on the recorded image
// digest and runtime.
func (r *Recorded) Request() (run.Request, error) {
	m := r.Manifest().Reproducible
	q := m.Request
	opts := run.Options{
		Image: m.ImageDigest, Runtime: m.Runtime.Name, Limits: q.Limits,
		Network: netpolicy.Request{Mode: netpolicy.Mode(q.Network), Policy: q.NetworkPolicy, Rules: q.NetworkRules, Secrets: q.NetworkSecrets},
		Mounts:  q.Mounts, Env: q.Env, Workdir: q.Workdir,
	}
	if q.NetworkCaps != nil {
		opts.Network.Caps = *q.NetworkCaps
	}
	for _, f := range q.Files {
		content, ok := r.Entries[artifacts.DirInput+"/"+f.Path]
		if !ok {
			return run.Request{}, fmt.Errorf("the bundle lacks the input file %s", f.Path)
		}
		opts.Files = append(opts.Files, run.File{Path: f.Path, Content: content, Executable: f.Executable})
	}
	if q.Stdin {
		opts.Stdin = r.Entries[artifacts.EntryStdin]
	}
	if q.Seed != "" {
		seed, err := strconv.ParseUint(q.Seed, 10, 64)
		if err != nil {
			return run.Request{}, fmt.Errorf("seed %q: %w", q.Seed, err)
		}
		opts.Seed = &seed
	}
	// The program's tool calls are answered as they were, by the record
	// of this bundle, and the tools its caller declared are declared again
	// (the record answers them; no caller is asked).
	var caller tools.CallerSide
	if len(q.Tools) > 0 {
		opts.Tools, opts.ReplayOf, opts.ToolRecord = q.Tools, r.Bundle.Digest, r.Entries[artifacts.EntryToolCalls]
		if opts.ToolRecord == nil {
			opts.ToolRecord = []byte{}
		}
		if b, ok := r.Entries[artifacts.EntryToolSpecs]; ok {
			var specs []tools.Tool
			if err := json.Unmarshal(b, &specs); err != nil {
				return run.Request{}, fmt.Errorf("the bundle's tools: %w", err)
			}
			for _, t := range specs {
				if name, ok := strings.CutPrefix(t.Name, tools.CallerProvider+"."); ok {
					t.Name = name
					caller.Tools = append(caller.Tools, t)
				}
			}
		}
	}
	// A program can tell a pre-started interpreter from a fresh one.
	opts.Interpreter = run.InterpreterFresh
	if q.Prestarted {
		opts.Interpreter = run.InterpreterPrestarted
	}
	req := run.Request{Options: opts, Caller: caller}
	switch q.Kind {
	case "code":
		code, ok := "", false
		for p, b := range r.Entries {
			if strings.HasPrefix(p, artifacts.DirCode+"/") {
				code, ok = string(b), true
			}
		}
		if !ok {
			return run.Request{}, errors.New("the bundle records code but holds none")
		}
		req.Program = &run.Program{Language: q.Language, Code: code}
	case "command":
		req.Command = &run.Command{Argv: q.Argv, Shell: q.Shell}
		if q.Shell != "" {
			req.Command.Argv = nil
		}
	default:
		return run.Request{}, fmt.Errorf("the bundle records a request of kind %q", q.Kind)
	}
	return req, nil
}

// Engine runs a request and serves the bundles of runs: the engine in this
// process (task.Service) or a daemon (client.Client).
type Engine interface {
	Run(ctx context.Context, req run.Request, obs run.Observer) (run.Result, error)
	OpenBundle(ctx context.Context, digest string) (io.ReadCloser, error)
}

// Check is one comparison of a replay.
type Check struct {
	Name     string `json:"name"`
	Match    bool   `json:"match"`
	Recorded string `json:"recorded,omitempty"`
	Replayed string `json:"replayed,omitempty"`
	Diff     string `json:"diff,omitempty"`
}

// Report is the result of a replay.
type Report struct {
	// Kind is "judgement" for a judgement's replay, empty for a run's.
	Kind           string   `json:"kind,omitempty"`
	Reproduced     bool     `json:"reproduced"`
	RecordedBundle string   `json:"recorded_bundle"`
	ReplayedBundle string   `json:"replayed_bundle"`
	RecordedRun    string   `json:"recorded_run"`
	ReplayedRun    string   `json:"replayed_run"`
	Checks         []Check  `json:"checks"`
	Warnings       []string `json:"warnings,omitempty"`
}

// Options tune a replay. A bundle is its author's: a replay asks for
// nothing of the daemon that its caller did not allow, whatever the bundle
// records.
type Options struct {
	// AllowImageDrift runs on the current image of the recorded name when
	// the recorded digest is not present, and warns instead of refusing.
	AllowImageDrift bool
	// AllowMounts are the operator mounts the bundle may ask for.
	AllowMounts []string
	// AllowRuntimes are the runtimes the bundle may ask for besides
	// DefaultRuntime, the daemon's, which it would get without asking.
	AllowRuntimes  []string
	DefaultRuntime string
	// LiveReadTools calls the read-only tools the program calls again,
	// live, instead of answering them from the record.
	LiveReadTools bool
}

// check refuses a request that asks for what o does not allow, naming
// what to allow.
func (o Options) check(req run.Request) error {
	var asks []string
	for _, m := range req.Options.Mounts {
		if !slices.Contains(o.AllowMounts, m) {
			asks = append(asks, fmt.Sprintf("the mount %s (--allow-mount %s)", m, m))
		}
	}
	if rt := req.Options.Runtime; rt != "" && rt != o.DefaultRuntime && !slices.Contains(o.AllowRuntimes, rt) {
		asks = append(asks, fmt.Sprintf("the runtime %s, not the daemon's default %s (--allow-runtime %s)", rt, o.DefaultRuntime, rt))
	}
	if len(asks) > 0 {
		return fmt.Errorf("the bundle asks for what this replay was not allowed: %s: %w", strings.Join(asks, "; "), errdefs.ErrPermissionDenied)
	}
	return nil
}

// Replay runs rec's request again on e and compares the outcome.
func Replay(ctx context.Context, rec *Recorded, e Engine, opts Options) (*Report, error) {
	req, err := rec.Request()
	if err != nil {
		return nil, err
	}
	if err := opts.check(req); err != nil {
		return nil, err
	}
	req.Options.LiveReadTools = opts.LiveReadTools && len(req.Options.Tools) > 0
	m := rec.Manifest()
	var warnings []string
	if req.Options.Network.Mode == netpolicy.AllowList {
		warnings = append(warnings, "the run had network access: what the hosts it reached answer may differ now, so it may not reproduce")
	}
	got, err := rerun(ctx, e, req)
	var missing *task.ImageMissingError
	if errors.As(err, &missing) {
		if !opts.AllowImageDrift {
			return nil, fmt.Errorf("the recorded image %s (%s) is not present; --rebuild builds it again from its recipe (as root, on the daemon's host), --allow-image-drift runs on the current %s instead: %w",
				req.Options.Image, m.Reproducible.Image, m.Reproducible.Image, err)
		}
		warnings = append(warnings, fmt.Sprintf("image %s is not present; replayed on the current %s", req.Options.Image, m.Reproducible.Image))
		req.Options.Image = m.Reproducible.Image
		got, err = rerun(ctx, e, req)
	}
	if err != nil {
		return nil, err
	}
	rep := Compare(rec, got)
	rep.Warnings = append(warnings, rep.Warnings...)
	return rep, nil
}

// rerun runs req on e and loads the new run's bundle.
func rerun(ctx context.Context, e Engine, req run.Request) (*Recorded, error) {
	res, err := e.Run(ctx, req, discard{})
	if err != nil {
		return nil, err
	}
	if res.BundleDigest == "" {
		return nil, fmt.Errorf("the replayed run left no bundle: %s", res.BundleError)
	}
	rc, err := e.OpenBundle(ctx, res.BundleDigest)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return Load(rc, res.BundleDigest, artifacts.DefaultReadLimits())
}

// discard takes a replayed run's events: the bundle has its output.
type discard struct{}

func (discard) Started(run.Started) error       { return nil }
func (discard) Output(run.Stream, []byte) error { return nil }

// Compare reports what of want reproduced in got.
func Compare(want, got *Recorded) *Report {
	a, b := want.Manifest().Reproducible, got.Manifest().Reproducible
	rep := &Report{
		RecordedBundle: want.Bundle.Digest, ReplayedBundle: got.Bundle.Digest,
		RecordedRun: want.Manifest().Run.RunID, ReplayedRun: got.Manifest().Run.RunID,
	}
	add := func(c Check) { rep.Checks = append(rep.Checks, c) }
	add(scalar("status", a.Outcome.Status, b.Outcome.Status))
	add(scalar("exit_code", strconv.Itoa(a.Outcome.ExitCode), strconv.Itoa(b.Outcome.ExitCode)))
	for _, s := range []struct {
		name         string
		total1, tot2 int64
	}{{artifacts.EntryStdout, a.Outcome.StdoutTotal, b.Outcome.StdoutTotal}, {artifacts.EntryStderr, a.Outcome.StderrTotal, b.Outcome.StderrTotal}} {
		c := content(s.name, want.Entries[s.name], got.Entries[s.name])
		if c.Match && s.total1 != s.tot2 {
			c.Match = false
			c.Recorded, c.Replayed = fmt.Sprintf("%d bytes in all", s.total1), fmt.Sprintf("%d bytes in all", s.tot2)
		}
		add(c)
	}
	for _, p := range outputPaths(a.Outputs, b.Outputs) {
		add(output(p, a.Outputs, b.Outputs, want.Entries, got.Entries))
	}
	if len(a.Request.Tools) > 0 {
		add(toolCalls(want.Entries[artifacts.EntryToolCalls], got.Entries[artifacts.EntryToolCalls]))
	}
	if a.OutputsTruncated != b.OutputsTruncated {
		add(scalar("outputs listing truncated", strconv.FormatBool(a.OutputsTruncated), strconv.FormatBool(b.OutputsTruncated)))
	}
	rep.Reproduced = true
	for _, c := range rep.Checks {
		rep.Reproduced = rep.Reproduced && c.Match
	}
	// Where it ran: differences explain a failure to reproduce, but do not
	// make one.
	for _, w := range []struct{ what, x, y string }{
		{"image digest", a.ImageDigest, b.ImageDigest},
		{"runtime", a.Runtime.Name + " " + a.Runtime.Version, b.Runtime.Name + " " + b.Runtime.Version},
		{"backend", a.Backend, b.Backend},
		{"environment", strings.Join(a.Environment, " "), strings.Join(b.Environment, " ")},
	} {
		if w.x != w.y {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("the %s differs: recorded %q, replayed %q", w.what, w.x, w.y))
		}
	}
	return rep
}

func scalar(name, x, y string) Check {
	return Check{Name: name, Match: x == y, Recorded: x, Replayed: y}
}

// content compares two entries, with a diff when they are text.
func content(name string, x, y []byte) Check {
	c := Check{Name: name, Match: bytes.Equal(x, y)}
	if c.Match {
		return c
	}
	c.Recorded, c.Replayed = fmt.Sprintf("%d bytes", len(x)), fmt.Sprintf("%d bytes", len(y))
	if isText(x) && isText(y) {
		c.Diff = UnifiedDiff(string(x), string(y), "recorded", "replayed", 3, 40)
	} else {
		c.Diff = "binary content differs"
	}
	return c
}

func isText(b []byte) bool {
	return !bytes.ContainsRune(b, 0) && bytes.Equal(bytes.ToValidUTF8(b, nil), b)
}

// outputPaths lists the paths of both listings, sorted.
func outputPaths(a, b []artifacts.Output) []string {
	var paths []string
	for _, o := range append(slices.Clone(a), b...) {
		if !slices.Contains(paths, o.Path) {
			paths = append(paths, o.Path)
		}
	}
	slices.Sort(paths)
	return paths
}

func output(p string, a, b []artifacts.Output, x, y map[string][]byte) Check {
	find := func(outs []artifacts.Output) *artifacts.Output {
		i := slices.IndexFunc(outs, func(o artifacts.Output) bool { return o.Path == p })
		if i < 0 {
			return nil
		}
		return &outs[i]
	}
	name := artifacts.DirOutput + "/" + p
	oa, ob := find(a), find(b)
	switch {
	case oa == nil:
		return Check{Name: name, Recorded: "absent", Replayed: ob.Type}
	case ob == nil:
		return Check{Name: name, Recorded: oa.Type, Replayed: "absent"}
	case oa.Type != ob.Type:
		return Check{Name: name, Recorded: oa.Type, Replayed: ob.Type}
	case oa.Type != "file":
		return Check{Name: name, Match: true}
	case oa.SHA256 != "" && ob.SHA256 != "":
		return content(name, x[name], y[name])
	}
	// Not in a bundle: only the size can be compared.
	return Check{Name: name, Match: oa.Size == ob.Size, Recorded: fmt.Sprintf("%d bytes, not stored", oa.Size), Replayed: fmt.Sprintf("%d bytes, not stored", ob.Size)}
}
