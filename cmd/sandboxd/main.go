// Command sandboxd runs untrusted code for AI agents, each task in a fresh,
// limited container, and is also the client for people and scripts. Each
// verb is a file of its own; `sandboxd help` lists them:
//
//	sandboxd serve     run the daemon (gRPC on a unix socket, optionally TCP; MCP over HTTP)
//	sandboxd mcp       MCP over stdio, for MCP hosts
//	sandboxd run       run code or a command through the daemon, or in a session
//	sandboxd attach | logs | wait | cancel | runs    follow, wait for, cancel and list runs
//	sandboxd session   create, list, show and delete sessions
//	sandboxd images    list languages, images, runtimes, limits and the pool
//	sandboxd bundle    fetch a run's artifact bundle, or one of its files
//	sandboxd verify    check a bundle: every entry, the whole, hostile shapes
//	sandboxd inspect   show what a bundle says ran and came out
//	sandboxd replay    run a bundle's request again and compare
//	sandboxd audit     check the audit log's hash chain
//	sandboxd health    exit 0 when the daemon serves (a readiness probe)
//	sandboxd version   print the version
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	goruntime "runtime"
	"strings"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc/experimental"

	"github.com/sandboxd/sandboxd/server"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// exitError carries a process exit code out of a command.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"serve", "run the daemon", runServe},
		{"mcp", "serve MCP over stdio: the command an MCP host launches", runMCP},
		{"run", "run code or a command in a fresh sandbox, or in a session", runRun},
		{"attach", "follow a run, live or ended, from offsets: its output, status and exit code", runFollow("attach")},
		{"logs", "print a run's output from its start to its end", runFollow("logs")},
		{"wait", "wait for a run's end: its status line and exit code", runFollow("wait")},
		{"cancel", "kill a running run", runFollow("cancel")},
		{"runs", "list your running and recent runs", runFollow("runs")},
		{"session", "sessions: session create|list|get|delete|upload|download|files|fork|shell|start|ps|logs|kill|port|ports", runSession},
		{"images", "list languages, images, runtimes and limits", runImages},
		{"image", "build an image from its recipe, offline and bit for bit, or print its SBOM: image build|sbom", runImage},
		{"bundle", "fetch a run's bundle, or one output file of it: bundle get|file", runBundle},
		{"verify", "check that a bundle is sound: every entry, the whole, no hostile shapes", runVerify},
		{"inspect", "show what a bundle says ran and came out", runInspect},
		{"replay", "run a bundle's request again and report what reproduced", runReplay},
		{"judge", "judge submissions against test cases from a JSONL file: a verdict per case", runJudge},
		{"key", "rotate this host's signing key, or print its public half: key rotate|public", runKey},
		{"audit", "check the audit log's hash chain: audit verify FILE", runAudit},
		{"health", "exit 0 when the daemon serves, 1 when not (a readiness probe)", runHealth},
		{"version", "print this binary's version and the daemon's", runVersion},
	}
}

func main() {
	experimental.SetDefaultBufferPool(server.BufferPool())
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "--version" {
		fmt.Fprintln(stdout, binaryVersion())
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		// The verbs of subcommands take -h as their own, not a
		// subcommand's.
		if len(args) > 1 && isHelp(args[1]) && subcommands[c.name] {
			if c.name == "session" {
				fmt.Fprint(stderr, sessionUsage)
			} else {
				fmt.Fprintln(stderr, usages[c.name])
			}
			return 0
		}
		err := c.run(args[1:], stdout, stderr)
		if printUsageError(stderr, c.name, err) {
			return 2
		}
		var exit exitError
		switch {
		case err == nil:
			return 0
		case errors.As(err, &exit):
			return exit.code
		case errors.Is(err, flag.ErrHelp):
			return 0
		}
		fmt.Fprintf(stderr, "sandboxd %s: %s\n", c.name, describe(err))
		return 125
	}
	fmt.Fprintf(stderr, "sandboxd: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

// describe is err's message after the name the API gives its class, as in
// "PermissionDenied: runtime: ...", so that a refusal says what kind it is;
// the class's own words, which wrapping leaves at the end ("...: already
// exists"), are said once, by the name.
func describe(err error) string {
	msg := err.Error()
	for _, c := range []struct {
		is    func(error) bool
		class error
		name  string
	}{
		{errdefs.IsInvalidArgument, errdefs.ErrInvalidArgument, "InvalidArgument"},
		{errdefs.IsNotFound, errdefs.ErrNotFound, "NotFound"},
		{errdefs.IsAlreadyExists, errdefs.ErrAlreadyExists, "AlreadyExists"},
		{errdefs.IsPermissionDenied, errdefs.ErrPermissionDenied, "PermissionDenied"},
		{errdefs.IsUnauthorized, errdefs.ErrUnauthenticated, "Unauthenticated"},
		{errdefs.IsResourceExhausted, errdefs.ErrResourceExhausted, "ResourceExhausted"},
		{errdefs.IsFailedPrecondition, errdefs.ErrFailedPrecondition, "FailedPrecondition"},
		{errdefs.IsUnavailable, errdefs.ErrUnavailable, "Unavailable"},
		{errdefs.IsInternal, errdefs.ErrInternal, "Internal"},
	} {
		if c.is(err) {
			msg = strings.TrimSuffix(msg, ": "+c.class.Error())
			return c.name + ": " + msg + connectionHint(msg)
		}
	}
	return msg + connectionHint(msg)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: sandboxd COMMAND [flags]")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'sandboxd COMMAND -h' for a command's flags.")
}

// subcommands are the verbs whose first argument is a subcommand.
var subcommands = map[string]bool{"session": true, "image": true, "bundle": true, "key": true, "audit": true}

// binaryVersion is this binary's version, the Go it was built with, and
// its platform.
func binaryVersion() string {
	return fmt.Sprintf("sandboxd %s (%s, %s/%s)", version, goruntime.Version(), goruntime.GOOS, goruntime.GOARCH)
}

// runVersion prints this binary's version and the daemon's, which may
// differ after an upgrade that did not restart it.
func runVersion(args []string, stdout, stderr io.Writer) error {
	var c clientFlags
	fs := verbFlags("version", stderr)
	c.register(fs)
	if err := fs.Parse(args); err != nil {
		return parseError(fs, err)
	}
	if fs.NArg() > 0 {
		return badUsage("takes no arguments")
	}
	fmt.Fprintln(stdout, "client: "+binaryVersion())
	c.retry = 0 // a version is never refused for being busy
	inv, err := c.inventory()
	if err != nil {
		return err
	}
	where := c.socket
	if c.addr != "" {
		where = c.addr
	}
	fmt.Fprintf(stdout, "daemon: sandboxd %s on %s %s, at %s\n", inv.Version, inv.Backend, inv.BackendVersion, where)
	return nil
}
