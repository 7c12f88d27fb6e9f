//go:build integration

package conformance

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/task/run"
)

func testOutputIsStreamed(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	obs := &observer{}
	res := s.run(t, svc, python("import time\nprint('first')\ntime.sleep(2)\nprint('second')", limits.Limits{}), obs)
	defer s.noContainerOfRun(t, res.RunID)
	if res.Status != run.StatusOK {
		t.Fatalf("status = %s (%s)", res.Status, res.Message)
	}
	var first, second time.Time
	for _, c := range obs.chunks {
		if bytes.Contains(c.data, []byte("first")) && first.IsZero() {
			first = c.at
		}
		if bytes.Contains(c.data, []byte("second")) {
			second = c.at
		}
	}
	if first.IsZero() || second.IsZero() {
		t.Fatalf("chunks = %q, want first and second", obs.output(run.Stdout))
	}
	// The program sleeps 2 s between the two prints: the first must have
	// arrived well before the second was even written.
	if gap := second.Sub(first); gap < 1500*time.Millisecond {
		t.Fatalf("first arrived only %v before second: output was not streamed", gap)
	}
}

// vmHWM reads this process's peak resident memory.
func vmHWM(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}

func testOutputFloodNoNewline(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	// Reset the peak-RSS mark so that VmHWM measures this run only.
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatalf("reset peak RSS: %v", err)
	}
	before := vmHWM(t)
	var delivered int64
	obs := &observer{}
	obs.onOutput = func(_ run.Stream, p []byte) { delivered += int64(len(p)) }
	code := "import sys\nblock = b'x' * (1 << 20)\nfor _ in range(100):\n    sys.stdout.buffer.write(block)\n"
	res := s.run(t, svc, python(code, limits.Limits{Timeout: 60 * time.Second}), obs)
	defer s.noContainerOfRun(t, res.RunID)
	// The observer keeps chunks; drop them before measuring nothing else.
	obs.chunks = nil
	grown := vmHWM(t) - before
	if res.Status != run.StatusOutputLimit {
		t.Errorf("status = %s (%s), want OUTPUT_LIMIT", res.Status, res.Message)
	}
	if delivered != res.Limits.StdoutBytes {
		t.Errorf("delivered %d bytes, want exactly the cap %d", delivered, res.Limits.StdoutBytes)
	}
	if !res.StdoutTruncated || res.StdoutTotal <= res.Limits.StdoutBytes {
		t.Errorf("truncated = %v total = %d, want truncated with the total counted", res.StdoutTruncated, res.StdoutTotal)
	}
	if grown > 64<<20 {
		t.Errorf("the daemon's peak RSS grew by %d MiB, want under 64 MiB", grown>>20)
	}
	t.Logf("delivered %d of %d bytes; peak RSS grew %d KiB", delivered, res.StdoutTotal, grown>>10)
}

func testBinaryOutputIntact(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	obs := &observer{}
	code := "import sys\nb = bytes(range(256)) * 4\nsys.stdout.buffer.write(b)\nsys.stdout.flush()\nsys.stderr.buffer.write(b[::-1])\n"
	res := s.run(t, svc, python(code, limits.Limits{}), obs)
	defer s.noContainerOfRun(t, res.RunID)
	want := bytes.Repeat(func() []byte {
		b := make([]byte, 256)
		for i := range b {
			b[i] = byte(i)
		}
		return b
	}(), 4)
	if got := obs.output(run.Stdout); !bytes.Equal(got, want) {
		t.Errorf("stdout is %d bytes and differs from the 1024 written", len(got))
	}
	rev := bytes.Clone(want)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	if got := obs.output(run.Stderr); !bytes.Equal(got, rev) {
		t.Errorf("stderr is %d bytes and differs from the 1024 written", len(got))
	}
}

// testLargeWritesArriveWhole writes big chunks through print and through
// the binary buffer: every byte must arrive, whatever the kernel does with
// pipe writes.
func testLargeWritesArriveWhole(t *testing.T, s *suite) {
	svc := s.service(t, nil)
	code := `import sys
print('x' * 3000000)
for _ in range(4):
    sys.stdout.buffer.write(b'y' * (1 << 20))
sys.stdout.flush()
print('z' * 1000000, file=sys.stderr)
`
	obs := &observer{}
	res := s.run(t, svc, python(code, limits.Limits{StdoutBytes: 16 << 20, StderrBytes: 16 << 20}), obs)
	defer s.noContainerOfRun(t, res.RunID)
	wantOut := int64(3000001 + 4<<20)
	if res.StdoutTotal != wantOut || res.StderrTotal != 1000001 || int64(len(obs.output(run.Stdout))) != wantOut {
		t.Fatalf("stdout %d (delivered %d), stderr %d; want %d and 1000001", res.StdoutTotal, len(obs.output(run.Stdout)), res.StderrTotal, wantOut)
	}
}
