package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

// TestEveryVerbHasHelp: `sandboxd VERB -h` exits 0 and prints the verb's
// own synopsis, for every verb.
func TestEveryVerbHasHelp(t *testing.T) {
	for _, c := range commands() {
		var stdout, stderr bytes.Buffer
		code := dispatch([]string{c.name, "-h"}, &stdout, &stderr)
		out := stderr.String()
		if code != 0 || !strings.HasPrefix(out, "usage:") || !strings.Contains(out, "sandboxd "+c.name+" ") && !strings.Contains(out, "sandboxd "+c.name+"\n") {
			t.Errorf("sandboxd %s -h: exit %d\n%s", c.name, code, out)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := dispatch([]string{"--version"}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "go1.") {
		t.Errorf("sandboxd --version: exit %d %q", code, stdout.String())
	}
	stderr.Reset()
	dispatch([]string{"--help"}, &stdout, &stderr)
	if !strings.Contains(stderr.String(), "session create|list|get|delete|upload|download|files|fork") {
		t.Errorf("sandboxd --help does not list every session verb:\n%s", stderr.String())
	}
}

// TestUsageErrorsSayWhatIsWrong: a command line that says nothing to do,
// or not enough, exits 2 with a line naming what is wrong, then the
// verb's synopsis; nothing is dialled.
func TestUsageErrorsSayWhatIsWrong(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "-c", "print(1)"}, "sandboxd run: -c needs --lang"},
		{[]string{"run"}, "sandboxd run: nothing to run"},
		{[]string{"logs"}, "sandboxd logs: give the run's id"},
		{[]string{"wait", "a", "b"}, "sandboxd wait: give the run's id"},
		{[]string{"runs", "x"}, "sandboxd runs: takes no arguments"},
		{[]string{"session", "download", "ID"}, "sandboxd session: session download takes 2 arguments, not 1"},
		{[]string{"session", "explode"}, `sandboxd session: unknown subcommand "explode"`},
		{[]string{"bundle"}, "sandboxd bundle: give a subcommand: get or file"},
		{[]string{"bundle", "file", "sha256:x"}, "sandboxd bundle: bundle file takes a bundle's digest and a path"},
		{[]string{"image", "paint"}, `sandboxd image: unknown subcommand "paint"`},
		{[]string{"key"}, "sandboxd key: give a subcommand: rotate or public"},
		{[]string{"audit", "check"}, "sandboxd audit: give the subcommand verify"},
		{[]string{"version", "now"}, "sandboxd version: takes no arguments"},
	} {
		var stdout, stderr bytes.Buffer
		code := dispatch(tt.args, &stdout, &stderr)
		out := stderr.String()
		if code != 2 || !strings.HasPrefix(out, tt.want) || !strings.Contains(out, "usage:") {
			t.Errorf("sandboxd %s: exit %d\n%s\nwant exit 2, %q and the synopsis", strings.Join(tt.args, " "), code, out, tt.want)
		}
	}
}

// TestSessionFlagsAfterArguments: as documented, -o may follow the
// arguments of session download.
func TestSessionFlagsAfterArguments(t *testing.T) {
	var stdout, stderr bytes.Buffer
	// No daemon answers on this socket: getting as far as dialling means
	// the command line was understood.
	code := dispatch([]string{"session", "download", "ID", "out.txt", "-o", "/dev/null", "--socket", "/nonexistent/sandboxd.sock"}, &stdout, &stderr)
	if code == 2 || strings.Contains(stderr.String(), "usage") {
		t.Fatalf("exit %d:\n%s", code, stderr.String())
	}
}

// TestDescribeNamesTheClassOnce: a refusal is named by its class, and the
// class's words that wrapping leaves at its end are not said again.
func TestDescribeNamesTheClassOnce(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("claim: instance %q is held by the live daemon: stop the other: %w", "a", errdefs.ErrAlreadyExists),
			`AlreadyExists: claim: instance "a" is held by the live daemon: stop the other`},
		{fmt.Errorf("image %q: %w", "x", errdefs.ErrNotFound), `NotFound: image "x"`},
		{errors.New("plain"), "plain"},
	} {
		if got := describe(tc.err); got != tc.want {
			t.Errorf("describe(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// TestMistypedFlagIsNamed: a flag a command lacks is answered with the
// one it most likely meant, on the command line and in a config file.
func TestMistypedFlagIsNamed(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--language", "python", "-c", "1"}, "did you mean --lang?"},
		{[]string{"run", "--memroy", "1GiB", "-c", "1"}, "did you mean --memory?"},
		{[]string{"run", "--tim", "1s", "-c", "1"}, "did you mean --timeout?"},
		{[]string{"serve", "--max-runing", "3"}, "did you mean --max-running?"},
	} {
		var stdout, stderr bytes.Buffer
		if code := dispatch(tc.args, &stdout, &stderr); code != 2 || !strings.HasSuffix(strings.TrimSpace(stderr.String()), tc.want) {
			t.Errorf("%q: exit %d, stderr ends %q; want exit 2 and %q last", tc.args, code, tail(stderr.String()), tc.want)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := dispatch([]string{"run", "--frobnicate", "-c", "1"}, &stdout, &stderr); code != 2 || strings.Contains(stderr.String(), "did you mean") {
		t.Errorf("a flag like none: exit %d, %q", code, tail(stderr.String()))
	}
	if got := closest("pids", []string{"pids", "pid-file"}); got != "pids" {
		t.Errorf("closest(pids) = %q", got)
	}
}

func tail(s string) string {
	s = strings.TrimSpace(s)
	return s[max(0, len(s)-120):]
}
