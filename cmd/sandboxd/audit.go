package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/sandboxd/sandboxd/audit"
)

// runAudit is `sandboxd audit verify FILE`.
func runAudit(args []string, stdout, stderr io.Writer) error {
	if len(args) != 2 || args[0] != "verify" {
		return badUsage("give the subcommand verify and the log's FILE")
	}
	rep, err := audit.Verify(args[1])
	var p *audit.Problem
	if errors.As(err, &p) {
		fmt.Fprintf(stderr, "sandboxd audit verify: TAMPERED: %v (%d sound lines before it)\n", err, rep.Lines)
		return exitError{1}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: sound chain of %d lines (%d to %d) in %d file(s); head %d sha256:%s\n",
		args[1], rep.Lines, rep.FirstSeq, rep.LastSeq, len(rep.Files), rep.LastSeq, rep.LastHash)
	if rep.FirstSeq > 1 {
		fmt.Fprintf(stdout, "lines before %d were rotated away (--audit-keep)\n", rep.FirstSeq)
	}
	return nil
}
