package task

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/taskdir"
)

// FuzzRun sends requests built from fuzzed fields through the whole
// engine, its pool on: no input may panic, and after each, whatever the
// outcome, nothing but the pool's containers and folders is left.
// make fuzz runs it briefly in CI.
func FuzzRun(f *testing.F) {
	f.Add("python", "print(1)", "", "", "", "data.csv", "a,b", "K", "v", "", int64(0), int64(0), int64(0), int64(0))
	f.Add("", "", "echo hi", "", "sub/dir", "", "", "", "", "", int64(64<<20), int64(500), int64(16), int64(1000))
	f.Add("bash", "ls", "", "ls\x00-l", "../x", "../../etc/passwd", "", "1BAD", "", "data", int64(-1), int64(1<<62), int64(-5), int64(1<<62))
	f.Add("python", "x", "", "", strings.Repeat("a", 300), "a/../b", "", "", "\xff", "nope", int64(0), int64(4000), int64(0), int64(0))
	rt := fake.New(echo)
	s := fuzzService(f, rt)
	f.Fuzz(func(t *testing.T, lang, code, shell, argv, workdir, file, content, envKey, envValue, mount string,
		memory, cpu, pids, timeoutMs int64) {
		req := run.Request{Options: run.Options{
			Workdir: workdir,
			Limits:  limits.Limits{MemoryBytes: memory, CPUMillis: cpu, Pids: pids, Timeout: time.Duration(timeoutMs) * time.Millisecond},
		}}
		switch {
		case lang != "" || code != "":
			req.Program = &run.Program{Language: lang, Code: code}
		case shell != "" || argv != "":
			req.Command = &run.Command{Shell: shell}
			if argv != "" {
				req.Command.Argv = strings.Split(argv, " ")
			}
		}
		if file != "" {
			req.Options.Files = []run.File{{Path: file, Content: []byte(content)}}
		}
		if envKey != "" {
			req.Options.Env = map[string]string{envKey: envValue}
		}
		if mount != "" {
			req.Options.Mounts = []string{mount}
		}
		ctx, cancel := context.WithTimeout(operatorCtx(), 10*time.Second)
		defer cancel()
		if _, err := s.Run(ctx, req, newRecorder()); err != nil && strings.TrimSpace(err.Error()) == "" {
			t.Fatalf("a refusal without a message for %+v", req)
		}
		assertNoContainers(t, rt)
		if err := s.PoolReady(ctx); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			entries, _ := os.ReadDir(s.tasks)
			if len(entries) == 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("task folders %v after %+v: want the pool's 2 only", entries, req)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// fuzzService is a service with a pool of one per image, for the whole
// fuzzing run.
func fuzzService(f *testing.F, rt *fake.Runtime) *Service {
	cfg := DefaultConfig()
	cfg.StateDir = f.TempDir()
	cfg.PoolSize, cfg.Prestart = 1, false
	cfg.Mounts = map[string]string{"data": f.TempDir()}
	cfg.AllowedImages = []string{"sha256:python", "sha256:shell"}
	s, err := New(context.Background(), rt, cfg, WithDisk(taskdir.FolderDisk{}))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Shutdown(context.Background()) })
	return s
}
