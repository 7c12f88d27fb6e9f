// Package run is the vocabulary of one run, shared by the engine and its
// edges: what a caller asks for (Request, checked against Bounds before
// anything is created), what it hears while the run goes (Started, output
// on a Stream, through an Observer), how the run ended (Result and its
// Status) and what the daemon knows of it by id (Info).
package run

import (
	"fmt"
	"path"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/task/tools"
)

// Request is one task: a program in a language, or a command. Exactly one
// of Program and Command is set.
type Request struct {
	Program *Program
	Command *Command
	Options Options
	// Caller is what the caller brings to the run's tool channel: its own
	// tools, who answers them, and who confirms a high-risk call. It is
	// the caller's, not the request's record: no digest or bundle holds it.
	Caller tools.CallerSide `json:"-"`
}

// Program is code in a language, run by the language's interpreter.
type Program struct {
	Language string
	Code     string
}

// Command is an argv in exec form, or a Shell line for /bin/sh -c.
type Command struct {
	Argv  []string
	Shell string
}

// Options are the settings common to code and commands.
type Options struct {
	// Image overrides the language's image, by catalog name.
	Image string
	// Runtime is the OCI runtime, "runc", "crun" or "runsc"; empty means the
	// operator's default.
	Runtime string
	// Limits are the requested limits; zero fields take the defaults.
	Limits limits.Limits
	// Network is the requested network; the zero value is none.
	Network netpolicy.Request
	// Files are placed read-only under /input.
	Files []File
	// Mounts name operator-configured host folders for /mnt/NAME.
	Mounts []string
	// Env adds to, or overrides, the default environment.
	Env map[string]string
	// Stdin is the program's standard input; nil means end of file.
	Stdin []byte
	// Workdir is the working directory, /workspace or below.
	Workdir string
	// Labels are caller metadata kept with the run.
	Labels map[string]string
	// Seed, when set, is exported as SANDBOX_SEED and seeds the
	// interpreter's random generators.
	Seed *uint64
	// SessionID runs the task as a call of that session (see
	// task.Service.CreateSession).
	SessionID string
	// IdempotencyKey makes a retry of the same request by the same caller
	// get the same run, not a second one (see task.Service.Run).
	IdempotencyKey string
	// Interpreter says whether a program may run in an interpreter
	// pre-started with its image's modules imported.
	Interpreter Interpreter
	// Tools names the tools the program may call, or patterns of them
	// ("orders.search", "orders.*"); without, it has no tool channel
	// (see docs/tools.md).
	Tools []string
	// ReplayOf makes the request a replay of the bundle of that digest:
	// its tool calls are answered from that bundle's record, which the
	// daemon reads from its store when it holds the bundle and the caller
	// may read it. ToolRecord is the record as the caller sends it (its
	// tool_calls.jsonl), which only the operator may send for a bundle
	// the store does not hold (sandboxd replay of a file). A request's
	// calls are answered from a record only in a replay, and only where
	// they pass the registry, permission and validation gates; the bundle
	// says which. LiveReadTools lets read-only tools be called again.
	ReplayOf      string
	ToolRecord    []byte
	LiveReadTools bool
}

// Interpreter is what a program's interpreter may be (docs/prestart.md).
type Interpreter string

// The interpreters a request may ask for.
const (
	// InterpreterAny takes a pre-started interpreter when a pooled
	// container has one that fits, and a fresh one otherwise.
	InterpreterAny Interpreter = ""
	// InterpreterFresh always starts the interpreter for the program.
	InterpreterFresh Interpreter = "fresh"
	// InterpreterPrestarted runs the program in a pre-started interpreter,
	// started for it when no pooled one waits, and refuses a request that
	// cannot have one: a replay of a run that had one asks for it.
	InterpreterPrestarted Interpreter = "prestarted"
)

// File is an input file.
type File struct {
	// Path is relative to /input.
	Path       string
	Content    []byte
	Executable bool
}

// Bounds on what a request may carry. They keep a request from costing the
// daemon more than its limits say, before any container exists.
type Bounds struct {
	// CodeBytes caps the size of a program.
	CodeBytes int64
	// Files caps the number of input files.
	Files int
	// FilesBytes caps the size of all input files together.
	FilesBytes int64
	// StdinBytes caps the size of Stdin.
	StdinBytes int64
	// ArgBytes caps the size of Argv or Shell together.
	ArgBytes int64
}

// DefaultBounds are the bounds of a daemon started without flags.
func DefaultBounds() Bounds {
	return Bounds{
		CodeBytes:  1 << 20,
		Files:      1000,
		FilesBytes: 16 << 20,
		StdinBytes: 16 << 20,
		ArgBytes:   128 << 10,
	}
}

// MessageBytes is the largest request these bounds admit, with room for the
// rest of the message; a transport should accept at least this much so that
// oversize fields are refused by name rather than by the transport.
func (b Bounds) MessageBytes() int64 {
	return b.CodeBytes + b.FilesBytes + b.StdinBytes + b.ArgBytes + 1<<20
}

const (
	maxPathBytes  = 1024
	maxNameBytes  = 255
	maxPathDepth  = 32
	maxEnv        = 256
	maxEnvBytes   = 64 << 10
	maxLabels     = 32
	maxLabelValue = 256
)

// Where a task's folders are in its container.
const (
	WorkspaceDir = "/workspace"
	InputDir     = "/input"
	MountDir     = "/mnt"
)

var (
	envKey   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	labelKey = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$`)
)

// Invalid is the error of a request's field: an invalid argument that
// names the field.
func Invalid(field, format string, args ...any) error {
	return errdefs.ErrInvalidArgument.WithMessage(field + ": " + fmt.Sprintf(format, args...))
}

// Validate checks everything that needs no engine and no policy: shapes,
// sizes and paths. Names that depend on the daemon (language, image, mounts,
// runtime) are checked by the engine.
func (r Request) Validate(b Bounds) error {
	switch {
	case (r.Program == nil) == (r.Command == nil):
		return Invalid("request", "set exactly one of a program and a command")
	case r.Program != nil:
		c := r.Program.Code
		if c == "" {
			return Invalid("code", "is empty")
		}
		if int64(len(c)) > b.CodeBytes {
			return Invalid("code", "is %d bytes, above the limit of %d", len(c), b.CodeBytes)
		}
		if !text(c) {
			return Invalid("code", "is not UTF-8 text without NUL bytes")
		}
	default:
		if err := validateCommand(r.Command.Argv, r.Command.Shell, b); err != nil {
			return err
		}
	}
	return r.Options.Validate(b)
}

func validateCommand(argv []string, shell string, b Bounds) error {
	switch {
	case len(argv) == 0 && shell == "":
		return Invalid("argv", "neither argv nor shell is set")
	case len(argv) > 0 && shell != "":
		return Invalid("argv", "argv and shell are both set; set one")
	case len(argv) > 0 && argv[0] == "":
		return Invalid("argv[0]", "is empty")
	}
	size := int64(len(shell))
	for i, a := range argv {
		if !text(a) {
			return Invalid(fmt.Sprintf("argv[%d]", i), "is not UTF-8 text without NUL bytes")
		}
		size += int64(len(a))
	}
	if !text(shell) {
		return Invalid("shell", "is not UTF-8 text without NUL bytes")
	}
	if size > b.ArgBytes {
		return Invalid("argv", "is %d bytes, above the limit of %d", size, b.ArgBytes)
	}
	return nil
}

// maxTools bounds the tool names and patterns of a request, and
// MaxToolRecordBytes the record of tool calls a replay takes.
const (
	maxTools           = 64
	MaxToolRecordBytes = 16 << 20
)

// Validate checks the options' shapes, sizes and paths.
func (o Options) Validate(b Bounds) error {
	if err := validateFiles(o.Files, b); err != nil {
		return err
	}
	seen := map[string]bool{}
	for i, m := range o.Mounts {
		if seen[m] {
			return Invalid(fmt.Sprintf("mounts[%d]", i), "%q is named twice", m)
		}
		seen[m] = true
	}
	if len(o.Env) > maxEnv {
		return Invalid("env", "has %d variables, above the limit of %d", len(o.Env), maxEnv)
	}
	envSize := 0
	for k, v := range o.Env {
		if !envKey.MatchString(k) {
			return Invalid("env", "%q is not a variable name ([A-Za-z_][A-Za-z0-9_]*)", k)
		}
		if !text(v) {
			return Invalid("env["+k+"]", "is not UTF-8 text without NUL bytes")
		}
		envSize += len(k) + len(v) + 2
	}
	if envSize > maxEnvBytes {
		return Invalid("env", "is %d bytes, above the limit of %d", envSize, maxEnvBytes)
	}
	if len(o.Tools) > maxTools {
		return Invalid("tools", "names %d tools, above the limit of %d", len(o.Tools), maxTools)
	}
	for i, p := range o.Tools {
		if _, err := path.Match(p, ""); err != nil || p == "" || len(p) > 128 || !text(p) {
			return Invalid(fmt.Sprintf("tools[%d]", i), "%q is not a tool's name or a pattern such as orders.* or *", p)
		}
	}
	if (len(o.ToolRecord) > 0 || o.LiveReadTools) && len(o.Tools) == 0 {
		return Invalid("tool_record", "answers a program's tool calls: the request names no tools")
	}
	if o.ReplayOf != "" {
		if _, err := artifacts.ParseDigest(o.ReplayOf); err != nil {
			return Invalid("replay_of", "%q is not sha256:<64 hex digits>", o.ReplayOf)
		}
	}
	if len(o.ToolRecord) > 0 && o.ReplayOf == "" {
		return Invalid("tool_record", "answers tool calls only in a replay: name the bundle it is the record of in replay_of")
	}
	if len(o.ToolRecord) > MaxToolRecordBytes {
		return Invalid("tool_record", "is %d bytes, above the limit of %d", len(o.ToolRecord), MaxToolRecordBytes)
	}
	if len(o.Tools) > 0 && o.Interpreter == InterpreterPrestarted {
		return Invalid("tools", "a program that calls tools starts its interpreter afresh, not pre-started")
	}
	switch o.Interpreter {
	case InterpreterAny, InterpreterFresh, InterpreterPrestarted:
	default:
		return Invalid("interpreter", "%q is not %q or %q", o.Interpreter, InterpreterFresh, InterpreterPrestarted)
	}
	if int64(len(o.Stdin)) > b.StdinBytes {
		return Invalid("stdin", "is %d bytes, above the limit of %d", len(o.Stdin), b.StdinBytes)
	}
	if _, err := ResolveWorkdir(o.Workdir); err != nil {
		return err
	}
	if len(o.Labels) > maxLabels {
		return Invalid("labels", "has %d labels, above the limit of %d", len(o.Labels), maxLabels)
	}
	for k, v := range o.Labels {
		if !labelKey.MatchString(k) {
			return Invalid("labels", "%q is not a label key ([A-Za-z0-9][A-Za-z0-9._/-], at most 63)", k)
		}
		if len(v) > maxLabelValue || !utf8.ValidString(v) {
			return Invalid("labels["+k+"]", "is not UTF-8 of at most %d bytes", maxLabelValue)
		}
	}
	return nil
}

// validateFiles checks that input files have clean, relative, distinct
// paths, none of which is a folder of another.
func validateFiles(files []File, b Bounds) error {
	if len(files) > b.Files {
		return Invalid("files", "has %d files, above the limit of %d", len(files), b.Files)
	}
	total := int64(0)
	paths := make(map[string]bool, len(files))
	for i, f := range files {
		field := fmt.Sprintf("files[%d].path", i)
		if err := CheckRelPath(field, f.Path); err != nil {
			return err
		}
		if paths[f.Path] {
			return Invalid(field, "%q is given twice", f.Path)
		}
		paths[f.Path] = true
		total += int64(len(f.Content))
	}
	if total > b.FilesBytes {
		return Invalid("files", "are %d bytes together, above the limit of %d", total, b.FilesBytes)
	}
	for i, f := range files {
		for dir := path.Dir(f.Path); dir != "."; dir = path.Dir(dir) {
			if paths[dir] {
				return Invalid(fmt.Sprintf("files[%d].path", i), "%q lies below the file %q", f.Path, dir)
			}
		}
	}
	return nil
}

// text says whether s is UTF-8 without NUL bytes, as what reaches the
// container's init must be.
func text(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// CheckRelPath refuses anything but a clean relative path of bounded size.
func CheckRelPath(field, p string) error {
	switch {
	case p == "":
		return Invalid(field, "is empty")
	case strings.IndexByte(p, 0) >= 0:
		return Invalid(field, "contains a NUL byte")
	case !utf8.ValidString(p):
		return Invalid(field, "is not UTF-8")
	case len(p) > maxPathBytes:
		return Invalid(field, "is %d bytes, above the limit of %d", len(p), maxPathBytes)
	case path.IsAbs(p):
		return Invalid(field, "%q is absolute; give a path relative to /input", p)
	}
	parts := strings.Split(p, "/")
	if len(parts) > maxPathDepth {
		return Invalid(field, "%q is deeper than %d folders", p, maxPathDepth)
	}
	for _, part := range parts {
		switch {
		case part == "..":
			return Invalid(field, "%q leaves its folder with ..", p)
		case part == "" || part == ".":
			return Invalid(field, "%q is not a clean path", p)
		case len(part) > maxNameBytes:
			return Invalid(field, "%q has a name longer than %d bytes", p, maxNameBytes)
		}
	}
	return nil
}

// ResolveWorkdir returns the absolute working directory for a requested
// one: empty is /workspace, a relative path is taken from /workspace, and an
// absolute one must lie in /workspace.
func ResolveWorkdir(w string) (string, error) {
	if w == "" {
		return WorkspaceDir, nil
	}
	if !text(w) {
		return "", Invalid("workdir", "is not UTF-8 text without NUL bytes")
	}
	if len(w) > maxPathBytes {
		return "", Invalid("workdir", "is %d bytes, above the limit of %d", len(w), maxPathBytes)
	}
	for _, part := range strings.Split(w, "/") {
		if part == ".." {
			return "", Invalid("workdir", "%q leaves its folder with ..", w)
		}
		if len(part) > maxNameBytes {
			return "", Invalid("workdir", "has a name of %d bytes, above the limit of %d", len(part), maxNameBytes)
		}
	}
	abs := path.Clean(w)
	if !path.IsAbs(abs) {
		abs = path.Join(WorkspaceDir, abs)
	}
	if abs != WorkspaceDir && !strings.HasPrefix(abs, WorkspaceDir+"/") {
		return "", Invalid("workdir", "%q is outside /workspace", w)
	}
	return abs, nil
}
