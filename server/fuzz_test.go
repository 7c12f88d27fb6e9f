package server

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/taskdir"
)

// FuzzRunRequests decodes fuzzed bytes as RunCode and RunCommand requests,
// converts them from the API and runs them through the engine, its pool
// on: no input may panic, each ends with a result or a status (a detached
// one with its start), and nothing
// but the pool's containers and folders is left after it. make fuzz runs
// it briefly in CI.
func FuzzRunRequests(f *testing.F) {
	seeds := []proto.Message{
		&pb.RunCodeRequest{Language: "python", Code: "print(1)"},
		&pb.RunCodeRequest{Language: "python", Code: "x", Options: &pb.RunOptions{Limits: &pb.Limits{TimeoutMs: 1<<58 + 5000}}},
		&pb.RunCodeRequest{Language: "python", Code: "x", Options: &pb.RunOptions{Limits: &pb.Limits{TimeoutMs: -1 << 63, MemoryBytes: 1 << 62}}},
		&pb.RunCommandRequest{Shell: "ls", Options: &pb.RunOptions{Workdir: string(make([]byte, 300)), Mounts: []string{"data"}}},
		&pb.RunCommandRequest{Argv: []string{"ls", ""}, Options: &pb.RunOptions{Files: []*pb.File{{Path: "../x"}}, Env: map[string]string{"": "x"}}},
	}
	for _, m := range seeds {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		_, isCode := m.(*pb.RunCodeRequest)
		f.Add(isCode, b)
	}
	rt := fake.New(func(context.Context, runtime.Spec) runtime.Exit { return runtime.Exit{} })
	cfg := task.DefaultConfig()
	cfg.StateDir = f.TempDir()
	cfg.PoolSize = 1
	cfg.Mounts = map[string]string{"data": f.TempDir()}
	cfg.AllowedImages = []string{"sha256:python", "sha256:shell"}
	svc, err := task.New(context.Background(), rt, cfg, task.WithDisk(taskdir.FolderDisk{}), task.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { svc.Shutdown(context.Background()) })
	srv := New(svc)
	tasks := filepath.Join(cfg.StateDir, "tasks", cfg.Instance)
	f.Fuzz(func(t *testing.T, isCode bool, b []byte) {
		ctx, cancel := context.WithTimeout(access.WithCaller(context.Background(), access.Caller{Name: "token"}), 10*time.Second)
		defer cancel()
		sink := &eventSink{ctx: ctx}
		var err error
		var detached bool
		if isCode {
			var req pb.RunCodeRequest
			if proto.Unmarshal(b, &req) != nil {
				return
			}
			detached = req.GetOptions().GetDetach()
			err = srv.RunCode(&req, sink)
		} else {
			var req pb.RunCommandRequest
			if proto.Unmarshal(b, &req) != nil {
				return
			}
			detached = req.GetOptions().GetDetach()
			err = srv.RunCommand(&req, sink)
		}
		// A detached call ends once its run has started; the run goes on.
		if n := len(sink.events); err == nil && (n == 0 || sink.events[n-1].GetResult() == nil && !(detached && sink.events[n-1].GetStarted() != nil)) {
			t.Fatalf("a call ended without a result, a status or (detached) its start: %d events", n)
		}
		if err := svc.PoolReady(ctx); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			entries, _ := os.ReadDir(tasks)
			// One per image, and python's with numpy and pandas loaded.
			if len(rt.Running()) == 0 && len(entries) == 3 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("running %v, task folders %v: want only the pool's", rt.Running(), entries)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}
