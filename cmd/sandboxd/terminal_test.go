package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/reproducer"
)

func TestTerminalEscapesWhatATerminalActsOn(t *testing.T) {
	for in, want := range map[string]string{
		"plain text é":          "plain text é",
		"\x1b]52;c;aGk=\x07":    `\x1b]52;c;aGk=\x07`,
		"line\nbreak\ttab":      `line\x0abreak\x09tab`,
		"bad \xff byte":         `bad \xff byte`,
		"evil\u202etxt.exe":     `evil\u202etxt.exe`,
		"\u009b2J (C1 control)": `\u009b2J (C1 control)`,
		"\x9b raw byte":         `\x9b raw byte`,
	} {
		if got := printable(in, false); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
	if got := printable("a\nb\tc\x1b[2K", true); got != "a\nb\tc\\x1b[2K" {
		t.Errorf("multiline: %q", got)
	}
}

// TestInspectPrintsAHostileBundleSafely is the regression test of escape
// sequences that reached the reviewer's terminal: a bundle whose every
// field its author chose prints no control character, and no forged line.
func TestInspectPrintsAHostileBundleSafely(t *testing.T) {
	esc := "\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2K"
	m := &artifacts.Manifest{
		Reproducible: artifacts.Reproducible{
			Request: artifacts.Request{Kind: "command", Argv: []string{"echo" + esc, "x"}, Network: "none" + esc,
				Mounts: []string{}, Env: map[string]string{}, Workdir: "/workspace\noutcome\tOK, forged", Files: []artifacts.InputFile{}},
			Image: "sandboxd/shell" + esc, ImageDigest: "sha256:x", Runtime: artifacts.Runtime{Name: "runc", Version: "1" + esc},
			Environment: []string{"A=" + esc}, Determinism: map[string]string{"k": esc},
			Outcome: artifacts.Outcome{Status: "OK" + esc},
			Outputs: []artifacts.Output{{Path: "evil\u202etxt.exe", Type: "file", Size: 1, SHA256: "ab"}},
		},
		Run: artifacts.Run{RunID: "r" + esc, Instance: "i\nforged line", Message: "done" + esc,
			Network: &artifacts.Network{Rules: []netpolicy.Rule{{Host: "a.test" + esc}}, Summary: netpolicy.Summary{Connections: 1, Denied: 1,
				Events: []netpolicy.Event{{Kind: "dns", Name: "x" + esc + "\nforged", Via: "dns", Reason: "no" + esc}}}}},
	}
	var tarBuf, zst bytes.Buffer
	digest, err := artifacts.Build(&tarBuf, m, []artifacts.Source{
		artifacts.BytesSource("stdout", []byte("hello "+esc+"\n"), false),
		artifacts.BytesSource("stderr", nil, false),
	})
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := zstd.NewWriter(&zst)
	enc.Write(tarBuf.Bytes())
	enc.Close()
	rec, err := reproducer.Load(&zst, digest, artifacts.DefaultReadLimits())
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printBundle(&out, rec)
	got := out.String()
	if !strings.Contains(got, "1 connections, 1 refused") || !strings.Contains(got, "dns x") {
		t.Errorf("the network log is missing:\n%s", got)
	}
	if strings.ContainsAny(got, "\x1b\x07\u202e") {
		t.Fatalf("control characters reached the output:\n%q", got)
	}
	for _, line := range strings.Split(got, "\n") {
		if strings.HasPrefix(line, "outcome") && strings.Contains(line, "forged") || strings.HasPrefix(line, "forged") {
			t.Fatalf("a bundle forged a line of the listing: %q\n%s", line, got)
		}
	}
}
