//go:build integration

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/client"

	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/task/run"
)

// countingLines prints "line 0" to "line N-1", one every 40 ms, then
// exits 3.
func countingLines(n int) string {
	return fmt.Sprintf("import sys, time\nfor i in range(%d):\n    print(f'line {i}', flush=True)\n    time.sleep(0.04)\nsys.exit(3)", n)
}

func linesUpTo(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

// cutAfter is an observer that keeps output until it has n bytes of
// stdout, then fails, as a client whose connection dropped.
type cutAfter struct {
	n   int
	mu  sync.Mutex
	got []byte
}

func (c *cutAfter) Started(run.Started) error { return nil }
func (c *cutAfter) Output(s run.Stream, p []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s == run.Stdout {
		c.got = append(c.got, p...)
	}
	if len(c.got) >= c.n {
		return fmt.Errorf("the connection dropped")
	}
	return nil
}

// TestDetachAttachAndFollow starts a run detached, follows part of it and
// drops, attaches again from where it stopped (the rest, byte for byte),
// and reads it whole with logs, wait and runs, live and once ended; then
// cancels another.
func TestDetachAttachAndFollow(t *testing.T) {
	requireDocker(t)
	d := startDaemon(t, t.TempDir(), instanceName(t))
	out, errOut, code := runCLI(t, d, "--detach", "--lang", "python", "-c", countingLines(40))
	id := strings.TrimSpace(out)
	if code != 0 || len(id) == 0 || strings.Contains(id, "\n") {
		t.Fatalf("run --detach: %q %q %d", out, errOut, code)
	}
	client, err := client.Dial(client.DialOptions{Socket: d.socket})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cut := &cutAfter{n: 30}
	if _, err := client.Attach(ctx, id, 0, 0, cut); err == nil {
		t.Fatal("the cut attach ended without an error")
	}
	had := len(cut.got)
	out, errOut, code = daemonCLI(t, d, "attach", id, "--stdout-offset", fmt.Sprint(had))
	want := linesUpTo(40)
	if code != 3 || string(cut.got)+out != want || !strings.Contains(errOut, "NONZERO_EXIT") {
		t.Fatalf("attach from %d: exit %d, %q + %q, want %q\n%s", had, code, cut.got, out, want, errOut)
	}
	if out, _, code := daemonCLI(t, d, "logs", id); code != 0 || out != want {
		t.Fatalf("logs of the ended run: %d %q", code, out)
	}
	if out, _, code := daemonCLI(t, d, "attach", id, "--stdout-offset", "35"); code != 3 || out != want[35:] {
		t.Fatalf("attach to the ended run from 35: %d %q", code, out)
	}
	if _, errOut, code := daemonCLI(t, d, "wait", id); code != 3 || !strings.Contains(errOut, "run "+id) {
		t.Fatalf("wait: %d %q", code, errOut)
	}
	if out, _, _ := daemonCLI(t, d, "runs"); !strings.Contains(out, id) || !strings.Contains(out, "NONZERO_EXIT") {
		t.Fatalf("runs: %q", out)
	}

	out, _, _ = runCLI(t, d, "--detach", "--lang", "python", "-c", "import time\ntime.sleep(120)")
	long := strings.TrimSpace(out)
	if _, errOut, code := daemonCLI(t, d, "cancel", long); code != 0 {
		t.Fatalf("cancel: %d %q", code, errOut)
	}
	if _, errOut, code := daemonCLI(t, d, "wait", long); code != 130 || !strings.Contains(errOut, "CANCELLED") {
		t.Fatalf("wait for the cancelled run: %d %q", code, errOut)
	}
	if _, errOut, code := daemonCLI(t, d, "attach", "no-such-run"); code == 0 || !strings.Contains(errOut, "not known") {
		t.Fatalf("attach to no run: %d %q", code, errOut)
	}
}

// TestIdempotentRetry drops a keyed run's stream mid-run and retries: one
// run, one bundle, the whole output; then kills the daemon with -9 during
// another keyed run, and the retry on the next daemon answers LOST rather
// than running it again.
func TestIdempotentRetry(t *testing.T) {
	requireDocker(t)
	state, instance := t.TempDir(), instanceName(t)
	d := startDaemon(t, state, instance)
	conn := d.conn()
	defer conn.Close()
	c := pb.NewSandboxServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	keyed := func(key, code string) *pb.RunCodeRequest {
		return &pb.RunCodeRequest{Language: "python", Code: code,
			Options: &pb.RunOptions{IdempotencyKey: key, Labels: map[string]string{"key": key}}}
	}
	req := keyed("job-1", countingLines(25))
	dropCtx, drop := context.WithCancel(ctx)
	stream, err := c.RunCode(dropCtx, req)
	if err != nil {
		t.Fatal(err)
	}
	var first string
	for {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if st := ev.GetStarted(); st != nil {
			first = st.GetRunId()
		}
		if len(ev.GetStdout()) > 0 {
			break
		}
	}
	drop()
	res, out := runKeyed(t, ctx, c, req)
	if res.GetRunId() != first || res.GetStatus() != pb.Status_NONZERO_EXIT || out != linesUpTo(25) {
		t.Fatalf("the retry: run %s (first %s) %s, %q", res.GetRunId(), first, res.GetStatus(), out)
	}
	if again, _ := runKeyed(t, ctx, c, req); again.GetRunId() != first || again.GetBundleDigest() != res.GetBundleDigest() {
		t.Fatalf("a retry after the end: run %s bundle %s", again.GetRunId(), again.GetBundleDigest())
	}
	runs, err := c.ListRuns(ctx, &pb.ListRunsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range runs.GetRuns() {
		if r.GetLabels()["key"] == "job-1" {
			n++
		}
	}
	bundles, _ := filepath.Glob(filepath.Join(state, "artifacts", "sha256", "*.tar.zst"))
	if n != 1 || len(bundles) != 1 {
		t.Fatalf("%d runs and %d bundles for one key", n, len(bundles))
	}

	// kill -9 during a keyed run: the next daemon says LOST.
	long := keyed("job-2", "import time\nprint('up', flush=True)\ntime.sleep(120)")
	stream, err = c.RunCode(ctx, long)
	if err != nil {
		t.Fatal(err)
	}
	var cutID string
	for cutID == "" {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		cutID = ev.GetStarted().GetRunId()
	}
	d.cmd.Process.Kill()
	<-d.exited
	d2 := startDaemon(t, state, instance)
	conn2 := d2.conn()
	defer conn2.Close()
	lost, out := runKeyed(t, ctx, pb.NewSandboxServiceClient(conn2), long)
	if lost.GetStatus() != pb.Status_LOST || lost.GetRunId() != cutID || out != "" {
		t.Fatalf("the retry after kill -9: %s run %s (cut %s), %q", lost.GetStatus(), lost.GetRunId(), cutID, out)
	}
	if left := containers(t, instance); len(left) != 0 {
		t.Fatalf("containers after the retry: %v (the run ran again?)", left)
	}
	if entries, _ := os.ReadDir(filepath.Join(state, "keys", instance)); len(entries) != 2 {
		t.Fatalf("key files: %v", entries)
	}
}

// runKeyed runs req to its end and returns its result and stdout.
func runKeyed(t *testing.T, ctx context.Context, c pb.SandboxServiceClient, req *pb.RunCodeRequest) (*pb.Result, string) {
	t.Helper()
	r, out, err := runToEnd(ctx, c, req)
	if err != nil {
		t.Fatal(err)
	}
	return r, out
}

// runToEnd runs req and returns its result and stdout, or the call's error.
func runToEnd(ctx context.Context, c pb.SandboxServiceClient, req *pb.RunCodeRequest) (*pb.Result, string, error) {
	stream, err := c.RunCode(ctx, req)
	if err != nil {
		return nil, "", err
	}
	var out strings.Builder
	for {
		ev, err := stream.Recv()
		if err != nil {
			return nil, "", err
		}
		out.Write(ev.GetStdout())
		if r := ev.GetResult(); r != nil {
			return r, out.String(), nil
		}
	}
}
