package judge

import (
	"fmt"

	"github.com/sandboxd/sandboxd/task/run"
)

// MaxCases bounds the cases of one submission: a larger test set is split
// over submissions, each with its own bundle.
const MaxCases = 1024

// maxNameBytes bounds a case's name.
const maxNameBytes = 256

// Validate checks what needs no daemon: the submission's shape and sizes
// within b, each case's means of being decided, and tolerances only on
// numbers. The error names the field, as cases[3].expected_stdout.
func (s Submission) Validate(b run.Bounds) error {
	if len(s.ID) > maxNameBytes {
		return run.Invalid("id", "is %d bytes, above the limit of %d", len(s.ID), maxNameBytes)
	}
	if err := s.program().Validate(b); err != nil {
		return err
	}
	switch {
	case len(s.Cases) == 0:
		return run.Invalid("cases", "is empty: give at least one case")
	case len(s.Cases) > MaxCases:
		return run.Invalid("cases", "has %d cases, above the limit of %d a submission: split them over submissions", len(s.Cases), MaxCases)
	}
	switch s.Isolation {
	case IsolationFresh, IsolationShared, "":
	default:
		return run.Invalid("isolation", "%q is not %q or %q", s.Isolation, IsolationFresh, IsolationShared)
	}
	if s.Checker != nil {
		if s.Checker.Language == "" {
			return run.Invalid("checker.language", "is empty")
		}
		c := run.Request{Program: &run.Program{Language: s.Checker.Language, Code: s.Checker.Code}}
		if err := c.Validate(b); err != nil {
			return run.Invalid("checker", "%v", err)
		}
	}
	total := int64(len(s.Code))
	for _, f := range s.Files {
		total += int64(len(f.Content))
	}
	for i, c := range s.Cases {
		field := func(name string) string { return fmt.Sprintf("cases[%d].%s", i, name) }
		if len(c.Name) > maxNameBytes {
			return run.Invalid(field("name"), "is %d bytes, above the limit of %d", len(c.Name), maxNameBytes)
		}
		decided := 0
		for _, set := range []bool{c.Expected != nil, c.Test != "", c.Compare.Kind == CompareChecker} {
			if set {
				decided++
			}
		}
		switch {
		case c.Compare.Kind == CompareChecker && s.Checker == nil:
			return run.Invalid(field("compare"), "is checker, and the submission has no checker")
		case c.Test != "" && decided > 1:
			return run.Invalid(field("test"), "decides the case by itself: give no expected_stdout and no checker with it")
		case decided == 0:
			return run.Invalid(field("expected_stdout"), "is not set, and neither is a test or a checker: nothing would decide the case")
		case c.Test != "" && s.Code == "":
			return run.Invalid(field("test"), "runs after the submission's code, and the submission is a command: give expected_stdout or a checker")
		case c.Test != "" && (len(c.Args) > 0 || c.Stdin != nil):
			return run.Invalid(field("test"), "is run as the program: give no args or stdin with it")
		}
		switch c.Compare.Kind {
		case CompareLines, CompareExact, CompareChecker:
			if c.Compare.Absolute != 0 || c.Compare.Relative != 0 {
				return run.Invalid(field("compare"), "has a tolerance, which only numbers comparisons take")
			}
		case CompareNumbers:
			if c.Expected == nil {
				return run.Invalid(field("expected_stdout"), "is not set: a numbers comparison needs it")
			}
			if c.Compare.Absolute < 0 || c.Compare.Relative < 0 || c.Compare.Absolute != c.Compare.Absolute || c.Compare.Relative != c.Compare.Relative {
				return run.Invalid(field("compare"), "tolerances must be numbers of at least 0")
			}
			if tok, ok := NotANumber(c.Expected); !ok && (c.Compare.Absolute != 0 || c.Compare.Relative != 0) {
				return run.Invalid(field("expected_stdout"), "has %q, which is not a number: a tolerance applies to numbers only; compare it exactly or with a checker", excerptString(tok))
			}
		default:
			return run.Invalid(field("compare"), "%q is not exact, lines, numbers or checker", c.Compare.Kind)
		}
		if s.Isolation == IsolationShared {
			if err := sharedCase(c, field); err != nil {
				return err
			}
		}
		req := s.caseRequest(c)
		if err := req.Validate(b); err != nil {
			return run.Invalid(field("request"), "%v", err)
		}
		total += int64(len(c.Stdin) + len(c.Expected) + len(c.Test))
		for _, f := range c.Files {
			total += int64(len(f.Content))
		}
		for _, a := range c.Args {
			total += int64(len(a))
		}
	}
	if limit := b.MessageBytes(); total > limit {
		return run.Invalid("cases", "are %d bytes together with the program, above the limit of %d a submission: split them over submissions", total, limit)
	}
	return nil
}

// program is the submission as a run, for checking its shapes.
func (s Submission) program() run.Request {
	if s.Code != "" || s.Language != "" {
		return run.Request{Program: &run.Program{Language: s.Language, Code: s.Code}, Options: s.options(nil, s.Limits)}
	}
	return run.Request{Command: &run.Command{Argv: s.Argv}, Options: s.options(nil, s.Limits)}
}

// caseRequest is c's run as far as shapes go: its own files beside the
// submission's, its stdin, args and limits.
func (s Submission) caseRequest(c Case) run.Request {
	req := s.program()
	req.Options.Files = append(append([]run.File(nil), s.Files...), c.Files...)
	req.Options.Stdin = c.Stdin
	if req.Command != nil {
		req.Command.Argv = append(append([]string(nil), s.Argv...), c.Args...)
	}
	req.Options.Limits = c.Limits.Over(s.Limits)
	return req
}

func excerptString(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// sharedCase refuses what a case of one shared sandbox cannot have: files
// of its own (the sandbox's /input is the submission's), and limits
// other than its time and output (the sandbox's are the submission's).
func sharedCase(c Case, field func(string) string) error {
	if len(c.Files) > 0 {
		return run.Invalid(field("files"), "a shared sandbox's cases share its /input: give the files with the submission, or isolation fresh")
	}
	l := c.Limits
	if l.MemoryBytes != 0 || l.CPUMillis != 0 || l.Pids != 0 || l.DiskBytes != 0 {
		return run.Invalid(field("limits"), "a shared sandbox's memory, CPU, pids and disk are the submission's: give a case only its timeout and output limits, or isolation fresh")
	}
	return nil
}
