package task

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
)

// TestBackgroundProcessesThroughTheEngine drives a session's background
// processes on the fake: output read from offsets (waiting for it), stdin,
// a signal, the bound on how many a session keeps, errors that name what
// is wrong, and their end with the session.
func TestBackgroundProcessesThroughTheEngine(t *testing.T) {
	rt := fake.New(fake.TestProgram)
	s := newService(t, rt, func(c *Config) { c.MaxSessions = 2; c.SessionProcesses = 2; c.ProcessOutputBytes = 4 })
	ctx := context.Background()
	info, err := s.CreateSession(ctx, session.Request{})
	if err != nil {
		t.Fatal(err)
	}
	start := func(argv ...string) session.ProcessInfo {
		t.Helper()
		p, err := s.StartProcess(ctx, session.ProcessRequest{SessionID: info.ID, Command: run.Command{Argv: argv}, Env: map[string]string{"WHO": "bg"}})
		if err != nil {
			t.Fatalf("StartProcess(%q) = %v", argv, err)
		}
		return p
	}
	cat := start("testprog", "env", "WHO", "cat")
	if cat.ID != "p1" || cat.State != session.Running || cat.Workdir != run.WorkspaceDir {
		t.Fatalf("started %+v", cat)
	}
	if err := s.WriteProcessStdin(ctx, info.ID, cat.ID, []byte("hello"), false); err != nil {
		t.Fatal(err)
	}
	// "bg\n" then "hello", of which the log keeps the last 4 bytes.
	var out session.Output
	for deadline := time.Now().Add(10 * time.Second); out.Info.StdoutBytes < 8 && time.Now().Before(deadline); {
		if out, err = s.ReadProcessOutput(ctx, info.ID, cat.ID, session.Offsets{}, 0, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if string(out.Stdout) != "ello" || out.Start.Stdout != 4 || out.Next.Stdout != 8 {
		t.Fatalf("read from 0: %q from %d to %d, want the last 4 bytes from 4", out.Stdout, out.Start.Stdout, out.Next.Stdout)
	}
	began := time.Now()
	if out, err = s.ReadProcessOutput(ctx, info.ID, cat.ID, out.Next, 0, 200*time.Millisecond); err != nil || len(out.Stdout) != 0 || time.Since(began) < 150*time.Millisecond {
		t.Fatalf("a read at the end: %q, %v after %v; want nothing, after the wait", out.Stdout, err, time.Since(began))
	}
	// The next call's bundle records what happened since the last.
	res, err := s.Run(ctx, run.Request{Command: &run.Command{Argv: []string{"testprog", "out", "x"}}, Options: run.Options{SessionID: info.ID}}, newRecorder())
	if err != nil || res.Session == nil || len(res.Session.Events) != 1 || res.Session.Events[0].Kind != artifacts.EventProcessStarted ||
		res.Session.Events[0].Process != "p1" || res.Session.Events[0].Argv[1] != "env" {
		t.Fatalf("a call after a process started: %+v, %v", res.Session, err)
	}
	start("testprog", "block")
	if _, err := s.StartProcess(ctx, session.ProcessRequest{SessionID: info.ID, Command: run.Command{Argv: []string{"testprog"}}}); !errdefs.IsResourceExhausted(err) {
		t.Fatalf("a third running process with --session-processes 2: %v, want RESOURCE_EXHAUSTED", err)
	}
	if _, err := s.SignalProcess(ctx, info.ID, cat.ID, 15); err != nil {
		t.Fatal(err)
	}
	ended, err := s.WaitProcess(ctx, info.ID, cat.ID)
	if err != nil || ended.State != session.Exited || ended.ExitCode != 143 || ended.EndedAt.IsZero() {
		t.Fatalf("after SIGTERM: %+v, %v; want EXITED with 143", ended, err)
	}
	if err := s.WriteProcessStdin(ctx, info.ID, cat.ID, []byte("late"), false); !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("stdin for an ended process: %v, want FAILED_PRECONDITION", err)
	}
	// The ended one makes room for the next.
	third := start("testprog", "block")
	if list, err := s.ListProcesses(ctx, info.ID); err != nil || len(list) != 2 || list[0].ID != "p2" || list[1].ID != third.ID {
		t.Fatalf("ListProcesses() = %+v, %v; want p2 and %s", list, err, third.ID)
	}
	for _, tt := range []struct {
		name string
		err  error
		is   func(error) bool
	}{
		{"no command", startErr(s, session.ProcessRequest{SessionID: info.ID}), errdefs.IsInvalidArgument},
		{"a workdir out of the workspace", startErr(s, session.ProcessRequest{SessionID: info.ID, Command: run.Command{Shell: "true"}, Workdir: "../x"}), errdefs.IsInvalidArgument},
		{"an unknown session", startErr(s, session.ProcessRequest{SessionID: "nope", Command: run.Command{Shell: "true"}}), errdefs.IsNotFound},
		{"another tenant's session", startErr(s, session.ProcessRequest{SessionID: info.ID, Command: run.Command{Shell: "true"}}, "team-b"), errdefs.IsNotFound},
		{"an unknown process", func() error { _, err := s.WaitProcess(ctx, info.ID, "p9"); return err }(), errdefs.IsNotFound},
		{"a bad signal", func() error { _, err := s.SignalProcess(ctx, info.ID, third.ID, 99); return err }(), errdefs.IsInvalidArgument},
		{"a negative offset", func() error {
			_, err := s.ReadProcessOutput(ctx, info.ID, third.ID, session.Offsets{Stdout: -1}, 0, 0)
			return err
		}(), errdefs.IsInvalidArgument},
	} {
		if !tt.is(tt.err) {
			t.Errorf("%s: %v", tt.name, tt.err)
		}
	}
	if _, err := s.DeleteSession(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if live := rt.Live(); len(live) > 0 {
		t.Fatalf("containers left: %v", live)
	}
	if _, err := s.ListProcesses(ctx, info.ID); !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("processes of an ended session: %v, want FAILED_PRECONDITION", err)
	}
}

// startErr starts a process as tenant (the operator when none) and returns
// the error.
func startErr(s *Service, req session.ProcessRequest, tenant ...string) error {
	ctx := context.Background()
	if len(tenant) > 0 {
		ctx = access.WithCaller(ctx, access.Caller{Name: tenant[0]})
	}
	_, err := s.StartProcess(ctx, req)
	return err
}

// TestATerminalProcessThroughTheEngine: a process with a terminal gets
// TERM and may be resized; one without may not, and a TERM that is not a
// name is refused by name.
func TestATerminalProcessThroughTheEngine(t *testing.T) {
	rt := fake.New(fake.TestProgram)
	s := newService(t, rt, func(c *Config) { c.MaxSessions = 1 })
	ctx := context.Background()
	info, err := s.CreateSession(ctx, session.Request{})
	if err != nil {
		t.Fatal(err)
	}
	tty, err := s.StartProcess(ctx, session.ProcessRequest{SessionID: info.ID, Command: run.Command{Argv: []string{"testprog", "env", "TERM", "block"}}, Terminal: &session.Terminal{}})
	if err != nil || !tty.Terminal {
		t.Fatalf("StartProcess() with a terminal = %+v, %v", tty, err)
	}
	out, err := s.ReadProcessOutput(ctx, info.ID, tty.ID, session.Offsets{}, 0, 10*time.Second)
	if err != nil || string(out.Stdout) != "xterm-256color\n" {
		t.Fatalf("TERM = %q, %v", out.Stdout, err)
	}
	if err := s.ResizeProcess(ctx, info.ID, tty.ID, 50, 120); err != nil {
		t.Fatal(err)
	}
	plain, err := s.StartProcess(ctx, session.ProcessRequest{SessionID: info.ID, Command: run.Command{Argv: []string{"testprog", "block"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ResizeProcess(ctx, info.ID, plain.ID, 50, 120); !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("a resize without a terminal: %v, want FAILED_PRECONDITION", err)
	}
	if err := s.ResizeProcess(ctx, info.ID, tty.ID, 0, 120); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("a resize to 0 rows: %v, want INVALID_ARGUMENT", err)
	}
	_, err = s.StartProcess(ctx, session.ProcessRequest{SessionID: info.ID, Command: run.Command{Argv: []string{"testprog"}}, Terminal: &session.Terminal{Term: "x; rm -rf /"}})
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "terminal.term") {
		t.Fatalf("a TERM that is no name: %v, want INVALID_ARGUMENT naming terminal.term", err)
	}
}

// TestRunningProcessesKeepASessionWhenTheOperatorSaysSo: past its idle
// TTL a session with a running background process ends, unless the
// operator counts processes as use (--processes-keep-alive); then it
// ends once they have.
func TestRunningProcessesKeepASessionWhenTheOperatorSaysSo(t *testing.T) {
	for _, keep := range []bool{false, true} {
		rt := fake.New(fake.TestProgram)
		s := newService(t, rt, func(c *Config) { c.MaxSessions, c.ProcessesKeepAlive = 1, keep })
		ctx := context.Background()
		info, err := s.CreateSession(ctx, session.Request{IdleTTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		p, err := s.StartProcess(ctx, session.ProcessRequest{SessionID: info.ID, Command: run.Command{Argv: []string{"testprog", "block"}}})
		if err != nil {
			t.Fatal(err)
		}
		s.expireSessions(time.Now().Add(2 * time.Minute))
		got, _ := s.GetSession(ctx, info.ID)
		if want := map[bool]session.State{false: session.Expired, true: session.Active}[keep]; got.State != want {
			t.Fatalf("keep-alive %v: the session past its idle TTL is %s, want %s", keep, got.State, want)
		}
		if !keep {
			continue
		}
		if _, err := s.SignalProcess(ctx, info.ID, p.ID, 9); err != nil {
			t.Fatal(err)
		}
		if _, err := s.WaitProcess(ctx, info.ID, p.ID); err != nil {
			t.Fatal(err)
		}
		s.expireSessions(time.Now().Add(2 * time.Minute))
		if got, _ := s.GetSession(ctx, info.ID); got.State != session.Expired {
			t.Fatalf("once its process ended: %s, want EXPIRED", got.State)
		}
	}
}
