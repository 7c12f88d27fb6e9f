// Package servertest serves the gRPC API in the test's own process: the
// engine on the fake runtime, and a gRPC server reached over bufconn.
package servertest

import (
	"context"
	"log/slog"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/taskdir"
)

// NewEngine starts an engine on the fake runtime running prog, with its
// state in a temp folder, plain folders for the tasks' (no root needed),
// and the pool off (the pool is the engine's business, tested there).
func NewEngine(t testing.TB, prog fake.Program, mutate func(*task.Config), opts ...task.Option) *task.Service {
	t.Helper()
	cfg := task.DefaultConfig()
	cfg.StateDir = t.TempDir()
	cfg.AllowedImages = []string{"sha256:python", "sha256:shell"}
	cfg.PoolSize = 0
	if mutate != nil {
		mutate(&cfg)
	}
	opts = append([]task.Option{task.WithDisk(taskdir.FolderDisk{}), task.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	svc, err := task.New(context.Background(), fake.New(prog), cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Shutdown(context.Background()) })
	return svc
}

// Serve serves g over an in-memory listener and returns a connection to
// it, dialled with opts; both end with the test.
func Serve(t testing.TB, g *grpc.Server, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	go g.Serve(lis)
	opts = append([]grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}, opts...)
	conn, err := grpc.NewClient("passthrough:///bufnet", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		g.Stop()
	})
	return conn
}
