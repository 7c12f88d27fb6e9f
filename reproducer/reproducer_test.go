package reproducer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/klauspost/compress/zstd"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/run"
)

func TestUnifiedDiff(t *testing.T) {
	tests := []struct {
		name, a, b, want string
	}{
		{"one line", "0.49\n", "0.48\n", "--- r\n+++ p\n@@ -1,1 +1,1 @@\n-0.49\n+0.48"},
		{"context", "a\nb\nc\nd\ne\nf\ng\n", "a\nb\nc\nX\ne\nf\ng\n", "--- r\n+++ p\n@@ -2,5 +2,5 @@\n b\n c\n-d\n+X\n e\n f"},
		{"added at the end", "a\n", "a\nb\n", "--- r\n+++ p\n@@ -1,1 +1,2 @@\n a\n+b"},
		{"no newline at the end", "a", "a\n", "--- r\n+++ p\n@@ -1,1 +1,1 @@\n-a\n\\ No newline at end of file\n+a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := UnifiedDiff(tt.a, tt.b, "r", "p", 2, 40); got != tt.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
	long := strings.Repeat("x\n", 3000)
	if got := UnifiedDiff(long, long+"y\n", "r", "p", 2, 40); !strings.Contains(got, "first difference is at line 3001") {
		t.Fatalf("long inputs: %s", got)
	}
	many := UnifiedDiff(strings.Repeat("a\n", 100), strings.Repeat("b\n", 100), "r", "p", 2, 10)
	if !strings.HasSuffix(many, "more lines)") || strings.Count(many, "\n") > 11 {
		t.Fatalf("the diff is not cut: %d lines", strings.Count(many, "\n"))
	}
}

// bundle builds a verified Recorded of a run with the given stdout and
// output file.
func bundle(t *testing.T, stdout, out string, mutate func(*artifacts.Manifest)) *Recorded {
	t.Helper()
	rec, _ := bundleBytes(t, stdout, out, mutate)
	return rec
}

// bundleBytes builds the bundle, and returns it as a Recorded and as the
// bytes of its file.
func bundleBytes(t *testing.T, stdout, out string, mutate func(*artifacts.Manifest)) (*Recorded, []byte) {
	t.Helper()
	m := &artifacts.Manifest{Reproducible: artifacts.Reproducible{
		Request: artifacts.Request{Kind: "code", Language: "python", Argv: []string{"python3", "/code/main.py"}, Network: "none",
			Mounts: []string{}, Env: map[string]string{"K": "v"}, Workdir: "/workspace", Seed: "7",
			Files: []artifacts.InputFile{{Path: "in.txt"}}, Stdin: true},
		Image: "sandboxd/python", ImageDigest: "sha256:" + strings.Repeat("1", 64), Runtime: artifacts.Runtime{Name: "runc", Version: "1"},
		Outcome: artifacts.Outcome{Status: "OK", StdoutTotal: int64(len(stdout))},
		Outputs: []artifacts.Output{{Path: "out.txt", Type: "file", Size: int64(len(out))}, {Path: "link", Type: "symlink"}},
	}}
	if mutate != nil {
		mutate(m)
	}
	var tarBuf, zst bytes.Buffer
	digest, err := artifacts.Build(&tarBuf, m, []artifacts.Source{
		artifacts.BytesSource("code/main.py", []byte("print(1)"), false),
		artifacts.BytesSource("input/in.txt", []byte("input"), false),
		artifacts.BytesSource("stdin", []byte("stdin"), false),
		artifacts.BytesSource("stdout", []byte(stdout), false),
		artifacts.BytesSource("stderr", nil, false),
		artifacts.BytesSource("output/out.txt", []byte(out), false),
	})
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := zstd.NewWriter(&zst)
	enc.Write(tarBuf.Bytes())
	enc.Close()
	rec, err := Load(bytes.NewReader(zst.Bytes()), digest, artifacts.DefaultReadLimits())
	if err != nil {
		t.Fatal(err)
	}
	return rec, zst.Bytes()
}

func TestRequestRebuildsTheRecordedRequest(t *testing.T) {
	req, err := bundle(t, "1\n", "x", nil).Request()
	if err != nil {
		t.Fatal(err)
	}
	o := req.Options
	if req.Program == nil || req.Program.Code != "print(1)" || req.Program.Language != "python" || string(o.Stdin) != "stdin" || *o.Seed != 7 ||
		len(o.Files) != 1 || string(o.Files[0].Content) != "input" || o.Image != "sha256:"+strings.Repeat("1", 64) || o.Runtime != "runc" ||
		o.Env["K"] != "v" || o.Network.Mode != "none" {
		t.Fatalf("request = %+v", req)
	}
}

func TestCompare(t *testing.T) {
	want := bundle(t, "1\n", "x", nil)
	if rep := Compare(want, bundle(t, "1\n", "x", func(m *artifacts.Manifest) { m.Run.RunID = "other" })); !rep.Reproduced {
		t.Fatalf("identical outputs did not reproduce: %+v", rep.Checks)
	}
	rep := Compare(want, bundle(t, "2\n", "y", func(m *artifacts.Manifest) {
		m.Reproducible.Runtime.Version = "2"
		m.Reproducible.Outputs = m.Reproducible.Outputs[:1]
	}))
	if rep.Reproduced {
		t.Fatal("different outputs reproduced")
	}
	differ := map[string]bool{}
	for _, c := range rep.Checks {
		if !c.Match {
			differ[c.Name] = true
		}
	}
	for _, name := range []string{"stdout", "output/out.txt", "output/link"} {
		if !differ[name] {
			t.Errorf("%s should differ: %+v", name, rep.Checks)
		}
	}
	if len(rep.Warnings) == 0 || !strings.Contains(rep.Warnings[0], "runtime") {
		t.Errorf("warnings = %v, want the runtime difference", rep.Warnings)
	}
}

// engine replays by running nothing: its runs leave a fixed bundle, or it
// refuses an image digest as missing.
type engine struct {
	digest   string
	bundle   []byte
	missing  bool
	requests []run.Request
}

func (e *engine) Run(_ context.Context, req run.Request, _ run.Observer) (run.Result, error) {
	e.requests = append(e.requests, req)
	if e.missing && strings.HasPrefix(req.Options.Image, "sha256:") {
		return run.Result{}, &task.ImageMissingError{Ref: req.Options.Image}
	}
	return run.Result{BundleDigest: e.digest}, nil
}

func (e *engine) OpenBundle(_ context.Context, digest string) (io.ReadCloser, error) {
	if digest != e.digest {
		return nil, errors.New("no such bundle")
	}
	return io.NopCloser(bytes.NewReader(e.bundle)), nil
}

func TestReplayImageDrift(t *testing.T) {
	rec, b := bundleBytes(t, "1\n", "x", nil)
	e := &engine{digest: rec.Bundle.Digest, bundle: b, missing: true}
	var missing *task.ImageMissingError
	if _, err := Replay(context.Background(), rec, e, Options{DefaultRuntime: "runc"}); !errors.As(err, &missing) {
		t.Fatalf("without drift allowed: %v", err)
	}
	e = &engine{digest: rec.Bundle.Digest, bundle: b, missing: true}
	rep, err := Replay(context.Background(), rec, e, Options{AllowImageDrift: true, DefaultRuntime: "runc"})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.requests) != 2 || e.requests[1].Options.Image != "sandboxd/python" || len(rep.Warnings) == 0 || !rep.Reproduced {
		t.Fatalf("requests %+v warnings %v reproduced %v", e.requests, rep.Warnings, rep.Reproduced)
	}
}

func TestDigestFromName(t *testing.T) {
	hex := strings.Repeat("ab", 32)
	for name, want := range map[string]string{
		"/var/lib/sandboxd/artifacts/sha256/" + hex + ".tar.zst": "sha256:" + hex,
		"sha256-" + hex + ".tar.zst":                             "sha256:" + hex,
		"bundle.tar.zst":                                         "",
		strings.Repeat("zz", 32) + ".tar.zst":                    "",
	} {
		if got := DigestFromName(name); got != want {
			t.Errorf("DigestFromName(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestReplayAsksOnlyWhatItIsAllowed is the regression test of a replay
// that re-granted what a bundle recorded: mounts, and a runtime other than
// the daemon's default, only when the caller allows them.
func TestReplayAsksOnlyWhatItIsAllowed(t *testing.T) {
	rec, b := bundleBytes(t, "1\n", "x", func(m *artifacts.Manifest) {
		m.Reproducible.Request.Mounts = []string{"secrets"}
	})
	for _, tt := range []struct {
		name string
		opts Options
		want string
	}{
		{"nothing allowed", Options{DefaultRuntime: "runsc"}, "--allow-mount secrets"},
		{"the mount only", Options{DefaultRuntime: "runsc", AllowMounts: []string{"secrets"}}, "--allow-runtime runc"},
		{"both", Options{DefaultRuntime: "runsc", AllowMounts: []string{"secrets"}, AllowRuntimes: []string{"runc"}}, ""},
		{"the runtime is the default", Options{DefaultRuntime: "runc", AllowMounts: []string{"secrets"}}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := &engine{digest: rec.Bundle.Digest, bundle: b}
			_, err := Replay(context.Background(), rec, e, tt.opts)
			if tt.want == "" {
				if err != nil || len(e.requests) != 1 {
					t.Fatalf("Replay() = %v after %d runs, want one run", err, len(e.requests))
				}
				return
			}
			if !errdefs.IsPermissionDenied(err) || !strings.Contains(err.Error(), tt.want) || len(e.requests) != 0 {
				t.Fatalf("Replay() = %v after %d runs, want a refusal naming %s and no run", err, len(e.requests), tt.want)
			}
		})
	}
}
