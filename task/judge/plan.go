package judge

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
)

// Plan is how a submission's runs are made: its language (nil for a
// command) and, once compiled, the files the compile built.
type Plan struct {
	Submission Submission
	Language   *images.Language
	// Built are the compiled program's files, placed under /input for
	// each case.
	Built []run.File
}

// Compiled says whether the submission is compiled once before its cases.
func (p Plan) Compiled() bool { return p.Language != nil && p.Language.Compile != nil }

// builtPaths are the paths the language's compile writes and its run
// command reads: each absolute path both name (/tmp/.program).
func builtPaths(l images.Language) []string {
	var out []string
	for _, a := range l.Command {
		if path.IsAbs(a) && slices.Contains(l.Compile, a) && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// CompileRequest is the one compile of a compiled submission: the
// compiler on the code under /input, writing what the run command reads
// into /workspace, whence the bundle keeps it. It runs with the daemon's
// default limits, not the program's: a compile needs more than a judged
// program is allowed.
func (p Plan) CompileRequest() run.Request {
	l, s := p.Language, p.Submission
	argv := slices.Clone(l.Compile)
	argv[len(argv)-1] = run.InputDir + "/" + l.File
	for i, a := range argv {
		if slices.Contains(builtPaths(*l), a) {
			argv[i] = run.WorkspaceDir + "/" + path.Base(a)
		}
	}
	o := s.options([]run.File{{Path: l.File, Content: []byte(s.Code)}}, limits.Limits{})
	o.Image = p.image()
	return run.Request{Command: &run.Command{Argv: argv}, Options: o}
}

// IsBuilt reports whether out, a path the compile left in /workspace, is
// part of what it built, and so goes to every case.
func (p Plan) IsBuilt(out string) bool {
	for _, a := range builtPaths(*p.Language) {
		b := path.Base(a)
		if out == b || strings.HasPrefix(out, b+"/") {
			return true
		}
	}
	return false
}

// CaseRequest is case i's run.
func (p Plan) CaseRequest(i int) run.Request {
	s, c := p.Submission, p.Submission.Cases[i]
	lim := c.Limits.Over(s.Limits)
	files := append(slices.Clone(s.Files), c.Files...)
	switch {
	case p.Language == nil:
		o := s.options(files, lim)
		o.Stdin = c.Stdin
		return run.Request{Command: &run.Command{Argv: append(slices.Clone(s.Argv), c.Args...)}, Options: o}
	case c.Test != "":
		return run.Request{Program: &run.Program{Language: s.Language, Code: s.Code + "\n\n" + c.Test}, Options: s.options(files, lim)}
	case p.Compiled():
		argv := p.builtArgv()
		o := s.options(append(slices.Clone(p.Built), files...), lim)
		o.Stdin, o.Image = c.Stdin, p.image()
		return run.Request{Command: &run.Command{Argv: append(argv, c.Args...)}, Options: o}
	case len(c.Args) > 0:
		// A program has no arguments: with some, it is a command that
		// runs the language's interpreter on the code, under /input.
		argv := slices.Clone(p.Language.Command)
		argv[len(argv)-1] = run.InputDir + "/" + p.Language.File
		o := s.options(append([]run.File{{Path: p.Language.File, Content: []byte(s.Code)}}, files...), lim)
		o.Stdin, o.Image = c.Stdin, p.image()
		return run.Request{Command: &run.Command{Argv: append(argv, c.Args...)}, Options: o}
	}
	o := s.options(files, lim)
	o.Stdin = c.Stdin
	return run.Request{Program: &run.Program{Language: s.Language, Code: s.Code}, Options: o}
}

// SessionRequest is the shared sandbox of a submission whose cases run in
// one: its image, the submission's limits (a case's timeout is its
// call's), its files and the program under /input.
func (p Plan) SessionRequest() session.Request {
	s := p.Submission
	files := slices.Clone(s.Files)
	if p.Language != nil {
		files = append(files, p.Built...)
		if !p.Compiled() {
			files = append(files, run.File{Path: p.Language.File, Content: []byte(s.Code)})
		}
	}
	o := s.options(files, s.Limits)
	o.Limits.Timeout = 0
	if p.Language != nil {
		o.Image = p.image()
	}
	return session.Request{Options: o}
}

// TestPath is where case i's program (the submission's code, then the
// case's test) is uploaded in a shared sandbox's /workspace.
func (p Plan) TestPath(i int) string { return fmt.Sprintf(".judge/%d/%s", i, p.Language.File) }

// SharedCaseRequest is case i's call in the shared sandbox sessionID: a
// new process, its stdin and its time and output limits.
func (p Plan) SharedCaseRequest(i int, sessionID string) run.Request {
	s, c := p.Submission, p.Submission.Cases[i]
	var argv []string
	switch {
	case p.Language == nil:
		argv = slices.Clone(s.Argv)
	case p.Compiled():
		argv = p.builtArgv()
	default:
		argv = slices.Clone(p.Language.Command)
		argv[len(argv)-1] = run.InputDir + "/" + p.Language.File
		if c.Test != "" {
			argv[len(argv)-1] = run.WorkspaceDir + "/" + p.TestPath(i)
		}
	}
	lim := c.Limits.Over(s.Limits)
	return run.Request{Command: &run.Command{Argv: append(argv, c.Args...)}, Options: run.Options{SessionID: sessionID, Stdin: c.Stdin,
		Limits: limits.Limits{Timeout: lim.Timeout, StdoutBytes: lim.StdoutBytes, StderrBytes: lim.StderrBytes}}}
}

// builtArgv is the language's run command on what the compile built,
// under /input.
func (p Plan) builtArgv() []string {
	built := builtPaths(*p.Language)
	argv := slices.Clone(p.Language.Command)
	for i, a := range argv {
		if slices.Contains(built, a) {
			argv[i] = run.InputDir + "/" + path.Base(a)
		}
	}
	return argv
}

// CheckerRequest is the checker's run on case i, whose program printed
// got: the case's stdin, expected stdout and got as files, with the
// daemon's default limits.
func (p Plan) CheckerRequest(i int, got []byte) run.Request {
	s, c := p.Submission, p.Submission.Cases[i]
	files := []run.File{{Path: CheckerInput, Content: orEmpty(c.Stdin)}, {Path: CheckerOutput, Content: orEmpty(got)}}
	if c.Expected != nil {
		files = append(files, run.File{Path: CheckerExpected, Content: c.Expected})
	}
	return run.Request{
		Program: &run.Program{Language: s.Checker.Language, Code: s.Checker.Code},
		Options: run.Options{Runtime: s.Runtime, Files: files, Env: s.Env, Seed: s.Seed},
	}
}

// image is the image a compiled or interpreted program's commands run in:
// the submission's, or its language's.
func (p Plan) image() string {
	if p.Submission.Image != "" {
		return p.Submission.Image
	}
	return p.Language.Image
}

// options are the run options every run of s shares.
func (s Submission) options(files []run.File, lim limits.Limits) run.Options {
	return run.Options{Image: s.Image, Runtime: s.Runtime, Limits: lim, Files: files, Env: s.Env, Seed: s.Seed}
}

func orEmpty(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
