package task

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/run"
)

// TestAttachFromOffsets attaches to a run while it writes, from offsets,
// and once it ended (from its bundle): each attacher gets exactly the
// bytes past its offsets, up to the stream's cap, and the result.
func TestAttachFromOffsets(t *testing.T) {
	gate, wrote := make(chan struct{}), make(chan struct{})
	rt := fake.New(func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		for i := range 5 {
			fmt.Fprintf(spec.Stdout, "out-%d\n", i)
		}
		io.WriteString(spec.Stderr, "err-0\n")
		close(wrote)
		<-gate
		for i := 5; i < 10; i++ {
			fmt.Fprintf(spec.Stdout, "out-%d\n", i)
		}
		io.WriteString(spec.Stderr, "err-1\n")
		io.WriteString(spec.Stdout, strings.Repeat("x", 2000)) // past the cap of 1024
		return runtime.Exit{}
	})
	s := newService(t, rt, nil, withStore(t))
	ctx := access.WithCaller(context.Background(), access.Caller{Name: "team-a"})
	first := newRecorder()
	type ran struct {
		res run.Result
		err error
	}
	done := make(chan ran, 1)
	go func() {
		res, err := s.Run(ctx, run.Request{Command: &run.Command{Argv: []string{"x"}}, Options: run.Options{Limits: limits.Limits{StdoutBytes: 1024}}}, first)
		done <- ran{res, err}
	}()
	select {
	case <-wrote:
	case r := <-done:
		t.Fatalf("the run ended before it wrote: %+v %v", r.res, r.err)
	}
	var id string
	for id == "" {
		id = first.runID()
		time.Sleep(time.Millisecond)
	}
	if _, err := s.Attach(access.WithCaller(context.Background(), access.Caller{Name: "team-b"}), id, 0, 0, newRecorder()); !errdefs.IsNotFound(err) {
		t.Fatalf("another tenant attached: %v", err)
	}
	live := newRecorder()
	attached := make(chan ran, 1)
	go func() {
		res, err := s.Attach(ctx, id, 12, 3, live)
		attached <- ran{res, err}
	}()
	time.Sleep(20 * time.Millisecond)
	close(gate)
	got, a := <-done, <-attached
	if got.err != nil || a.err != nil || a.res.RunID != id || a.res.Status != got.res.Status {
		t.Fatalf("run %v %v; attach %+v %v", got.res, got.err, a.res, a.err)
	}
	caller := first.text(run.Stdout)
	if len(caller) != 1024 || first.text(run.Stderr) != "err-0\nerr-1\n" {
		t.Fatalf("the caller got %q / %q", caller, first.text(run.Stderr))
	}
	if live.text(run.Stdout) != caller[12:] || live.text(run.Stderr) != "err-0\nerr-1\n"[3:] || len(live.started) != 1 {
		t.Fatalf("attached live from 12/3: %q / %q, started %d", live.text(run.Stdout), live.text(run.Stderr), len(live.started))
	}
	waitNoTaskFolders(t, s)
	ended := newRecorder()
	res, err := s.Attach(ctx, id, 50, 0, ended)
	if err != nil || res.BundleDigest != got.res.BundleDigest || ended.text(run.Stdout) != caller[50:] || ended.text(run.Stderr) != "err-0\nerr-1\n" {
		t.Fatalf("attached after the end from 50/0: %q / %q, %v", ended.text(run.Stdout), ended.text(run.Stderr), err)
	}
	if rn, err := s.Wait(ctx, id); err != nil || rn.Result == nil || rn.Result.RunID != id {
		t.Fatalf("Wait() = %+v, %v", rn, err)
	}
	if _, err := s.Attach(ctx, id, -1, 0, newRecorder()); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("a negative offset: %v", err)
	}
}
