package reproducer

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/sandboxd/sandboxd/artifacts"
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
	rec, err := Load(&zst, digest, artifacts.DefaultReadLimits())
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func TestRequestRebuildsTheRecordedRequest(t *testing.T) {
	req, err := bundle(t, "1\n", "x", nil).Request()
	if err != nil {
		t.Fatal(err)
	}
	if req.Kind != "code" || req.Code != "print(1)" || string(req.Stdin) != "stdin" || *req.Seed != 7 ||
		len(req.Files) != 1 || string(req.Files[0].Content) != "input" || req.Image != "sha256:"+strings.Repeat("1", 64) || req.Runtime != "runc" {
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

// runner replays by returning a fixed bundle, or refusing the digest.
type runner struct {
	got      *Recorded
	missing  bool
	requests []Request
}

func (r *runner) Run(_ context.Context, req Request) (*Recorded, error) {
	r.requests = append(r.requests, req)
	if r.missing && strings.HasPrefix(req.Image, "sha256:") {
		return nil, ErrImageMissing
	}
	return r.got, nil
}

func TestReplayImageDrift(t *testing.T) {
	rec := bundle(t, "1\n", "x", nil)
	r := &runner{got: rec, missing: true}
	if _, err := Replay(context.Background(), rec, r, Options{}); !errors.Is(err, ErrImageMissing) {
		t.Fatalf("without drift allowed: %v", err)
	}
	r = &runner{got: rec, missing: true}
	rep, err := Replay(context.Background(), rec, r, Options{AllowImageDrift: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.requests) != 2 || r.requests[1].Image != "sandboxd/python" || len(rep.Warnings) == 0 {
		t.Fatalf("requests %+v warnings %v", r.requests, rep.Warnings)
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
