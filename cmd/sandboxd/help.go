package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// usages are the verbs' synopses: `sandboxd VERB -h` prints them, then
// the flags (run and session print longer texts of their own), and a
// command line that says nothing to do prints them after its error.
var usages = map[string]string{
	"run": `usage: sandboxd run --lang LANG -c CODE | --lang LANG FILE | --sh LINE | [--] ARGV... [flags]
  run code or a command in a fresh sandbox, or in a session (--session)`,
	"session": "usage: sandboxd session create|list|get|delete|upload|download|files|fork ...\n  one sandbox kept for many calls",
	"serve": `usage: sandboxd serve [flags]
  run the daemon: gRPC on --socket (and --listen), MCP over HTTP on --mcp-listen,
  metrics and probes on --metrics-listen; flags may also come from --config FILE`,
	"mcp": `usage: sandboxd mcp [--socket PATH | --addr HOST:PORT ...]
  serve MCP over stdio, for the MCP host that launches it, on the daemon it reaches;
  with --in-process, run the engine in this process instead: the daemon's flags
  below (all but the client ones) apply only then`,
	"attach":  "usage: sandboxd attach RUN [--stdout-offset N] [--stderr-offset N]\n  follow a run, live or ended: its output from the offsets on, its status line, its exit code",
	"logs":    "usage: sandboxd logs RUN\n  a run's output from its start to its end",
	"wait":    "usage: sandboxd wait RUN\n  wait for a run's end: its status line and exit code",
	"cancel":  "usage: sandboxd cancel RUN\n  kill a running run",
	"runs":    "usage: sandboxd runs\n  your running and recent runs, newest first (a tenant sees its own)",
	"images":  "usage: sandboxd images\n  languages, images, runtimes, limits and the pool of the daemon",
	"image":   "usage:\n  sandboxd image build [flags] [NAME|DIR...]   build images from their recipes, offline and bit for bit\n  sandboxd image sbom [--lock FILE] NAME       print an image's SPDX SBOM from the lock",
	"bundle":  "usage:\n  sandboxd bundle get DIGEST -o FILE      the whole bundle, verified\n  sandboxd bundle file DIGEST PATH        one output file (PATH in /workspace) to stdout",
	"verify":  "usage: sandboxd verify FILE [--digest sha256:...]\n  check that a bundle is sound: every entry, the whole, no hostile shapes",
	"inspect": "usage: sandboxd inspect FILE\n  show what a bundle says ran and came out (verified first)",
	"replay":  "usage: sandboxd replay FILE|DIGEST [flags]\n  run a bundle's request again (a session's chain, for a session call) and compare",
	"judge":   "usage: sandboxd judge --lang LANG --cases FILE.jsonl [flags] SUBMISSION...\n  judge each submission's file against the cases, as one batch: a verdict per case, a table at the end\n  (exit 0: all accepted; 1: some not; 3: some not judged, retry them)",
	"key":     "usage: sandboxd key rotate|public [--state-dir DIR] [--instance NAME]\n  rotate this host's signing key, or print its public half",
	"audit":   "usage: sandboxd audit verify FILE\n  check the audit log's hash chain (FILE's rotated files FILE.N ... FILE.1 first)",
	"health":  "usage: sandboxd health [--socket PATH | --addr HOST:PORT ...]\n  exit 0 when the daemon serves, 1 when not (a readiness probe)",
	"version": "usage: sandboxd version [--socket PATH | --addr HOST:PORT]\n  print this binary's version, the Go it was built with and its platform, then the daemon's and its engine's\n  (sandboxd --version: this binary's only)",
}

// verbFlags is the flag set of a verb (name may be "VERB SUBVERB"): -h
// prints its synopsis and flags to stderr; a bad flag, the error and them.
func verbFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	verb, _, _ := strings.Cut(name, " ")
	fs.Usage = func() {
		fmt.Fprintln(stderr, usages[verb])
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintln(stderr, "\nflags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// usageError is a command line that does not say what to do: dispatch
// prints it with the verb's synopsis and exits 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func badUsage(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// isHelp says whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

// printUsageError writes err's message, and the verb's synopsis.
func printUsageError(stderr io.Writer, verb string, err error) bool {
	var u usageError
	if !errors.As(err, &u) {
		return false
	}
	fmt.Fprintf(stderr, "sandboxd %s: %s\n", verb, u.msg)
	if text, ok := usages[verb]; ok {
		fmt.Fprintln(stderr, text)
	}
	fmt.Fprintf(stderr, "(sandboxd %s -h for more)\n", verb)
	return true
}
