package client

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/server/servertest"
	"google.golang.org/grpc"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/run"
)

// startConn serves the engine on prog over an in-memory listener.
func startConn(t *testing.T, prog fake.Program, opts server.Options, mutate func(*task.Config), engine ...task.Option) *grpc.ClientConn {
	t.Helper()
	svc := servertest.NewEngine(t, prog, mutate, engine...)
	return servertest.Serve(t, server.NewGRPCServer(server.New(svc), server.NewHealth(), opts))
}

// hello writes to both streams, stdout with bytes that are not UTF-8.
func hello(_ context.Context, spec runtime.Spec) runtime.Exit {
	io.WriteString(spec.Stdout, "out\xff\xfe")
	io.WriteString(spec.Stderr, "err")
	return runtime.Exit{Code: 0, PeakMemoryBytes: 1 << 20}
}

// observer records what a Client reports.
type observer struct {
	started []run.Started
	out     map[run.Stream]string
}

func (o *observer) Started(s run.Started) error { o.started = append(o.started, s); return nil }
func (o *observer) Output(s run.Stream, p []byte) error {
	o.out[s] += string(p)
	return nil
}

// TestClientIsTheEngineOverGRPC runs tasks through Client and checks that
// it reports what the engine reports, with the same error classes.
func TestClientIsTheEngineOverGRPC(t *testing.T) {
	store, err := artifacts.OpenStore(t.TempDir(), artifacts.DefaultStoreOptions())
	if err != nil {
		t.Fatal(err)
	}
	conn := startConn(t, hello, server.Options{}, nil, task.WithArtifacts(store))
	c := NewClient(conn)
	ctx := context.Background()

	obs := &observer{out: map[run.Stream]string{}}
	seed := uint64(5)
	res, err := c.Run(ctx, run.Request{Program: &run.Program{Language: "python", Code: "x"}, Options: run.Options{Seed: &seed}}, obs)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != run.StatusOK || res.StdoutTotal != 5 || res.BundleDigest == "" || res.PeakMemoryBytes != 1<<20 {
		t.Fatalf("result = %+v", res)
	}
	if len(obs.started) != 1 || obs.started[0].RunID != res.RunID || obs.out[run.Stdout] != "out\xff\xfe" || obs.out[run.Stderr] != "err" {
		t.Fatalf("events: %+v %q", obs.started, obs.out)
	}

	_, err = c.Run(ctx, run.Request{Program: &run.Program{Language: "cobol", Code: "x"}}, obs)
	if !errdefs.IsInvalidArgument(err) || !strings.HasPrefix(err.Error(), "language:") {
		t.Fatalf("bad language: %v, want an invalid argument naming the field", err)
	}

	inv, err := c.Inventory(ctx)
	if err != nil || len(inv.Languages) != len(images.Default().Languages) || inv.DefaultRuntime != "runc" || inv.MaxLimits.Timeout == 0 {
		t.Fatalf("Inventory() = %+v, %v", inv, err)
	}

	rc, err := c.OpenBundle(ctx, res.BundleDigest)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := artifacts.Verify(rc, res.BundleDigest, artifacts.DefaultReadLimits(), nil); err != nil {
		t.Fatalf("the bundle read through the client: %v", err)
	}
	if _, err := c.OpenBundle(ctx, "sha256:"+strings.Repeat("0", 64)); !errdefs.IsNotFound(err) {
		t.Fatalf("missing bundle: %v", err)
	}
	var _ io.ReadCloser = rc
}
