//go:build integration

package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/task"
)

// testSessions runs the session group on one service with the pool on:
// sessions start from the pool like runs.
func testSessions(t *testing.T, target Target) {
	s := &suite{target: target, warm: true}
	svc := s.service(t, func(c *task.Config) { c.MaxSessions = 4 })
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, *suite, *task.Service)
	}{
		{"StateOutputsAndChain", testSessionState},
		{"TimeoutInterruptsAndKeepsState", testSessionTimeout},
		{"OutOfMemory", testSessionOOM},
		{"Isolation", testSessionIsolation},
		{"Expiry", testSessionExpiry},
		{"DeleteAndRefusals", testSessionDelete},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, s, svc) })
	}
	t.Run("LostAfterRestart", func(t *testing.T) { testSessionLost(t, s) })
}

// newSession creates a session and deletes it when the test ends, checking
// that its container is gone.
func newSession(t *testing.T, s *suite, svc *task.Service, req task.SessionRequest) task.SessionInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(task.WithCaller(context.Background(), task.Operator), time.Minute)
	defer cancel()
	if err := svc.PoolReady(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := svc.CreateSession(ctx, req)
	if err != nil {
		t.Fatalf("CreateSession() = %v", err)
	}
	if info.State != task.SessionActive || info.Start != task.StartWarm {
		t.Errorf("CreateSession() = %s, start %s; want ACTIVE from the pool", info.State, info.Start)
	}
	t.Cleanup(func() {
		if _, err := svc.DeleteSession(info.ID); err != nil {
			t.Errorf("DeleteSession() = %v", err)
		}
		s.noContainerOfRun(t, info.ID)
	})
	return info
}

// call runs a request in a session.
func call(t *testing.T, svc *task.Service, id string, req task.Request) (task.Result, *observer) {
	t.Helper()
	req.Options.SessionID = id
	obs := &observer{}
	ctx, cancel := context.WithTimeout(task.WithCaller(context.Background(), task.Operator), 2*time.Minute)
	defer cancel()
	res, err := svc.Run(ctx, req, obs)
	if err != nil {
		t.Fatalf("Run() in session %s = %v", id, err)
	}
	return res, obs
}

func shell(line string) task.Request {
	return task.Request{Command: &task.Command{Shell: line}}
}

func testSessionState(t *testing.T, s *suite, svc *task.Service) {
	sess := newSession(t, s, svc, task.SessionRequest{Language: "python"})
	var prev task.Result
	check := func(res task.Result, seq int64) {
		t.Helper()
		c := res.Session
		if c == nil || c.ID != sess.ID || c.Seq != seq {
			t.Fatalf("call %d: session = %+v", seq, c)
		}
		if c.ParentBundle != prev.BundleDigest {
			t.Errorf("call %d: parent bundle %s, want the previous call's %s", seq, c.ParentBundle, prev.BundleDigest)
		}
		if prev.Session != nil && c.WorkspaceBefore != prev.Session.WorkspaceAfter {
			t.Errorf("call %d: workspace before %s, the previous call left %s", seq, c.WorkspaceBefore, prev.Session.WorkspaceAfter)
		}
		b, _ := readBundle(t, svc, res)
		if got := b.Manifest.Run.Session; got == nil || *got != *c {
			t.Errorf("call %d: the bundle records session %+v, the result %+v", seq, got, c)
		}
		prev = res
	}

	res, _ := call(t, svc, sess.ID, python("import os\nx = 41\nprint('pid', os.getpid())", limits.Limits{}))
	if res.Status != task.StatusOK || res.Kernel == nil || res.Kernel.ExecutionCount != 1 || res.Kernel.Result != nil {
		t.Fatalf("first call: %s (%s), kernel %+v", res.Status, res.Message, res.Kernel)
	}
	check(res, 1)
	res, _ = call(t, svc, sess.ID, python("x + 1", limits.Limits{}))
	if res.Status != task.StatusOK || res.Kernel.Result["text/plain"] != "42" || res.Kernel.ExecutionCount != 2 {
		t.Fatalf("x + 1: %s (%s), kernel %+v", res.Status, res.Message, res.Kernel)
	}
	check(res, 2)
	res, obs := call(t, svc, sess.ID, python("from IPython.display import display, HTML\ndisplay(HTML('<b>hi</b>'))\n1/0", limits.Limits{}))
	if res.Status != task.StatusNonzeroExit || res.Kernel.Error == nil || res.Kernel.Error.Name != "ZeroDivisionError" {
		t.Fatalf("1/0: %s (%s), kernel %+v", res.Status, res.Message, res.Kernel)
	}
	if len(res.Kernel.Displays) != 1 || res.Kernel.Displays[0]["text/html"] != "<b>hi</b>" {
		t.Errorf("displays = %v", res.Kernel.Displays)
	}
	if !bytes.Contains(obs.output(task.Stderr), []byte("ZeroDivisionError")) {
		t.Errorf("the traceback is not on stderr: %q", obs.output(task.Stderr))
	}
	check(res, 3)

	// A command of the session: a file and a background process stay.
	res, _ = call(t, svc, sess.ID, shell("echo kept > /workspace/a.txt; sleep 300 >/dev/null 2>&1 & echo started"))
	if res.Status != task.StatusOK {
		t.Fatalf("command: %s (%s)", res.Status, res.Message)
	}
	check(res, 4)
	if len(res.Files) != 1 || res.Files[0].Path != "a.txt" || res.Files[0].Omitted != "" {
		t.Errorf("outputs = %+v, want a.txt stored", res.Files)
	}
	res, obs = call(t, svc, sess.ID, shell("cat /workspace/a.txt; cat /proc/[0-9]*/cmdline | tr '\\0' ' ' | grep -o 'sleep 30[0]' | head -1"))
	if got := string(obs.output(task.Stdout)); res.Status != task.StatusOK || got != "kept\nsleep 300\n" {
		t.Fatalf("the next call sees %q (%s), want the file and the sleep", got, res.Status)
	}
	check(res, 5)
	if len(res.Files) != 1 || !strings.Contains(res.Files[0].Omitted, "unchanged") {
		t.Errorf("outputs = %+v, want a.txt listed as unchanged", res.Files)
	}
	// The kernel saw it all, with its variables.
	res, _ = call(t, svc, sess.ID, python("open('/workspace/a.txt').read().strip() + str(x)", limits.Limits{}))
	if got := res.Kernel.Result["text/plain"]; got != "'kept41'" || res.Kernel.ExecutionCount != 4 {
		t.Errorf("kernel after commands = %q, count %d", got, res.Kernel.ExecutionCount)
	}
	check(res, 6)
	info, err := svc.GetSession(sess.ID)
	if err != nil || info.Calls != 6 || info.LastBundle != res.BundleDigest {
		t.Errorf("GetSession() = %+v, %v; want 6 calls, last bundle %s", info, err, res.BundleDigest)
	}
}

func testSessionTimeout(t *testing.T, s *suite, svc *task.Service) {
	sess := newSession(t, s, svc, task.SessionRequest{Language: "python"})
	call(t, svc, sess.ID, python("x = 'kept'", limits.Limits{}))
	res, _ := call(t, svc, sess.ID, python("import time\nwhile True: time.sleep(0.05)", limits.Limits{Timeout: time.Second}))
	if res.Status != task.StatusTimeout || res.Kernel == nil || res.Kernel.Error == nil || res.Kernel.Error.Name != "KeyboardInterrupt" {
		t.Fatalf("timed-out call: %s (%s), kernel %+v", res.Status, res.Message, res.Kernel)
	}
	res, _ = call(t, svc, sess.ID, python("x", limits.Limits{}))
	if res.Status != task.StatusOK || res.Kernel.Result["text/plain"] != "'kept'" {
		t.Fatalf("after the interrupt: %s (%s), kernel %+v", res.Status, res.Message, res.Kernel)
	}
	// A kernel that ignores the interrupt is killed; the next call gets
	// a new one.
	res, _ = call(t, svc, sess.ID, python("import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: time.sleep(0.05)", limits.Limits{Timeout: time.Second}))
	if res.Status != task.StatusKernelDied {
		t.Fatalf("a kernel ignoring SIGINT: %s (%s)", res.Status, res.Message)
	}
	res, _ = call(t, svc, sess.ID, python("'x' in dir()", limits.Limits{}))
	if res.Status != task.StatusOK || res.Kernel.Result["text/plain"] != "False" || res.Kernel.ExecutionCount != 1 {
		t.Fatalf("after KERNEL_DIED: %s (%s), kernel %+v", res.Status, res.Message, res.Kernel)
	}
	// A command past its timeout is killed, its session kept.
	res, _ = call(t, svc, sess.ID, task.Request{Command: &task.Command{Argv: []string{"sleep", "60"}}, Options: task.Options{Limits: limits.Limits{Timeout: time.Second}}})
	if res.Status != task.StatusTimeout {
		t.Fatalf("a command past its timeout: %s (%s)", res.Status, res.Message)
	}
	if res, _ := call(t, svc, sess.ID, shell("true")); res.Status != task.StatusOK {
		t.Fatalf("after a timed-out command: %s (%s)", res.Status, res.Message)
	}
}

func testSessionOOM(t *testing.T, s *suite, svc *task.Service) {
	sess := newSession(t, s, svc, task.SessionRequest{Language: "python", Options: task.Options{Limits: limits.Limits{MemoryBytes: 192 << 20}}})
	call(t, svc, sess.ID, python("x = 1", limits.Limits{}))
	req := python("b = bytearray(512 << 20)", limits.Limits{})
	req.Options.SessionID = sess.ID
	res, err := svc.Run(task.WithCaller(context.Background(), task.Operator), req, &observer{})
	if s.gvisor() {
		// Under gVisor the host's OOM killer ends the whole sandbox: the
		// session fails, and says so.
		if err == nil && res.Status == task.StatusKernelDied {
			return
		}
		info, gerr := svc.GetSession(sess.ID)
		if err == nil || !errdefs.IsUnavailable(err) || gerr != nil || info.State != task.SessionFailed {
			t.Fatalf("OOM under gVisor: %+v, %v; session %+v, %v", res, err, info, gerr)
		}
		return
	}
	if err != nil || res.Status != task.StatusKernelDied || !strings.Contains(res.Message, "lack of memory") {
		t.Fatalf("OOM: %s (%s), %v; want KERNEL_DIED for lack of memory", res.Status, res.Message, err)
	}
	res, _ = call(t, svc, sess.ID, python("1 + 1", limits.Limits{}))
	if res.Status != task.StatusOK || res.Kernel.Result["text/plain"] != "2" {
		t.Fatalf("after KERNEL_DIED: %s (%s)", res.Status, res.Message)
	}
}

func testSessionIsolation(t *testing.T, s *suite, svc *task.Service) {
	a := newSession(t, s, svc, task.SessionRequest{})
	b := newSession(t, s, svc, task.SessionRequest{})
	call(t, svc, a.ID, shell("echo secret > /workspace/secret; sleep 300 >/dev/null 2>&1 &"))
	res, obs := call(t, svc, b.ID, shell("ls -A /workspace; cat /proc/[0-9]*/cmdline | tr '\\0' ' ' | grep -c 'sleep 30[0]'; id -u"))
	out := strings.Fields(string(obs.output(task.Stdout)))
	if res.Status != task.StatusOK || len(out) != 2 || out[0] != "0" {
		t.Fatalf("session b sees %q (%s), want an empty workspace and no sleep of a", out, res.Status)
	}
	_, obsA := call(t, svc, a.ID, shell("id -u"))
	if uidA := strings.TrimSpace(string(obsA.output(task.Stdout))); uidA == out[1] {
		t.Errorf("both sessions run as uid %s", uidA)
	}
}

func testSessionExpiry(t *testing.T, s *suite, svc *task.Service) {
	ctx := task.WithCaller(context.Background(), task.Operator)
	ttl, err := svc.CreateSession(ctx, task.SessionRequest{TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	idle, err := svc.CreateSession(ctx, task.SessionRequest{IdleTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Calls keep the idle one alive past its idle TTL.
	for range 4 {
		time.Sleep(300 * time.Millisecond)
		call(t, svc, idle.ID, shell("true"))
	}
	for _, c := range []struct {
		id, why string
	}{{idle.ID, "idle TTL"}, {ttl.ID, "its TTL"}} {
		var info task.SessionInfo
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if info, err = svc.GetSession(c.id); err != nil || info.State != task.SessionActive {
				break
			}
		}
		if err != nil || info.State != task.SessionExpired || !strings.Contains(info.Reason, c.why) {
			t.Errorf("session %s = %+v, %v; want EXPIRED by %s", c.id, info, err, c.why)
		}
		s.noContainerOfRun(t, c.id)
	}
}

func testSessionDelete(t *testing.T, s *suite, svc *task.Service) {
	ctx := task.WithCaller(context.Background(), task.Operator)
	sess := newSession(t, s, svc, task.SessionRequest{})
	for name, req := range map[string]task.Request{
		"options.image":  {Command: &task.Command{Argv: []string{"true"}}, Options: task.Options{Image: "sandboxd/shell"}},
		"options.limits": {Command: &task.Command{Argv: []string{"true"}}, Options: task.Options{Limits: limits.Limits{MemoryBytes: 1 << 30}}},
		"options.files":  {Command: &task.Command{Argv: []string{"true"}}, Options: task.Options{Files: []task.File{{Path: "a", Content: []byte("a")}}}},
	} {
		req.Options.SessionID = sess.ID
		if _, err := svc.Run(ctx, req, &observer{}); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), name) {
			t.Errorf("a call setting %s: %v, want INVALID_ARGUMENT naming it", name, err)
		}
	}
	if _, err := svc.CreateSession(ctx, task.SessionRequest{TTL: 48 * time.Hour}); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "ttl") {
		t.Errorf("a TTL past the maximum: %v", err)
	}
	if _, err := svc.Run(ctx, task.Request{Command: &task.Command{Argv: []string{"true"}}, Options: task.Options{SessionID: "nope"}}, &observer{}); !errdefs.IsNotFound(err) {
		t.Errorf("a call in an unknown session: %v, want NOT_FOUND", err)
	}
	info, err := svc.DeleteSession(sess.ID)
	if err != nil || info.State != task.SessionDeleted {
		t.Fatalf("DeleteSession() = %+v, %v", info, err)
	}
	s.noContainerOfRun(t, sess.ID)
	_, err = svc.Run(ctx, task.Request{Command: &task.Command{Argv: []string{"true"}}, Options: task.Options{SessionID: sess.ID}}, &observer{})
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "DELETED") {
		t.Errorf("a call in a deleted session: %v, want FAILED_PRECONDITION saying it was deleted", err)
	}
	if _, err := svc.GetSession("nope"); !errdefs.IsNotFound(err) {
		t.Errorf("GetSession(unknown) = %v", err)
	}
}

// testSessionLost starts a second daemon of the same instance while the
// first holds a session, as a restart after kill -9 would: the new one
// removes the container and reports the session lost.
func testSessionLost(t *testing.T, s *suite) {
	var cfg task.Config
	first := s.service(t, func(c *task.Config) { c.MaxSessions = 2; cfg = *c })
	ctx := task.WithCaller(context.Background(), task.Operator)
	sess, err := first.CreateSession(ctx, task.SessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := task.New(context.Background(), s.target.Runtime, cfg, s.taskOpts...)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Shutdown(context.Background())
	info, err := second.GetSession(sess.ID)
	if err != nil || info.State != task.SessionLost {
		t.Fatalf("after the restart: %+v, %v; want LOST", info, err)
	}
	s.noContainerOfRun(t, sess.ID)
	b, _ := json.Marshal(info)
	if !bytes.Contains(b, []byte(sess.ID)) {
		t.Errorf("the lost session's info %s does not name it", b)
	}
	req := shell("true")
	req.Options.SessionID = sess.ID
	if _, err := second.Run(ctx, req, &observer{}); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("a call in a lost session: %v", err)
	}
}
