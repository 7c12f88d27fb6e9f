package task

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
	"github.com/sandboxd/sandboxd/task/tools"
)

// sessionProgram is what the fake's session containers run: argv[0]
// "sleep" blocks until the call is cut short; anything else echoes argv
// and the call's working folder.
func sessionProgram(ctx context.Context, spec runtime.Spec) runtime.Exit {
	if spec.Argv[0] == "sleep" {
		<-ctx.Done()
		return runtime.Exit{Code: 137}
	}
	io.WriteString(spec.Stdout, strings.Join(spec.Argv, " ")+" in "+spec.WorkingDir)
	return runtime.Exit{}
}

// TestSessionCallsThroughTheEngine drives the session call path on the
// fake: calls in order with their output and the session's count, a call
// past its timeout that leaves the session ACTIVE, and a container that
// dies, which ends the session FAILED with an error for the call.
func TestSessionCallsThroughTheEngine(t *testing.T) {
	rt := fake.New(sessionProgram)
	s := newService(t, rt, func(c *Config) { c.MaxSessions = 4 })
	ctx := context.Background()
	info, err := s.CreateSession(ctx, session.Request{})
	if err != nil {
		t.Fatal(err)
	}
	call := func(argv ...string) (run.Result, string, error) {
		rec := newRecorder()
		res, err := s.Run(ctx, run.Request{Command: &run.Command{Argv: argv}, Options: run.Options{SessionID: info.ID, Workdir: "sub", Limits: limits.Limits{Timeout: 300 * time.Millisecond}}}, rec)
		return res, rec.text(run.Stdout), err
	}
	for i, word := range []string{"one", "two"} {
		res, out, err := call("echo", word)
		if err != nil || res.Status != run.StatusOK || out != "echo "+word+" in /workspace/sub" || res.Session == nil || res.Session.Seq != int64(i+1) {
			t.Fatalf("call %d: %+v %q %v", i+1, res, out, err)
		}
	}
	res, _, err := call("sleep")
	if err != nil || res.Status != run.StatusTimeout {
		t.Fatalf("a call past its timeout: %+v %v, want TIMEOUT", res, err)
	}
	got, err := s.GetSession(ctx, info.ID)
	if err != nil || got.State != session.Active || got.Calls != 3 {
		t.Fatalf("after three calls: %+v %v, want ACTIVE with 3 calls", got, err)
	}

	for _, id := range rt.Live() {
		rt.Kill(id)
	}
	if _, _, err := call("echo", "dead"); err == nil {
		t.Fatal("a call in a dead container succeeded")
	}
	got, err = s.GetSession(ctx, info.ID)
	if err != nil || got.State != session.Failed {
		t.Fatalf("after its container died: %+v %v, want FAILED", got, err)
	}
	if live := rt.Live(); len(live) > 0 {
		t.Fatalf("containers left: %v", live)
	}
}

// TestAContainerThatEndsDuringACallIsTheCallsResult is the third review's
// fork bomb under gVisor: the host's OOM killer ended the session's whole
// sandbox during a call, which answered an RPC error. The call now ends
// with a status that says so, its bundle is written, and the session is
// FAILED after it; the next call is refused by name.
func TestAContainerThatEndsDuringACallIsTheCallsResult(t *testing.T) {
	rt := fake.New(sessionProgram)
	s := newService(t, rt, func(c *Config) { c.MaxSessions = 4 }, withStore(t))
	ctx := context.Background()
	info, err := s.CreateSession(ctx, session.Request{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(200 * time.Millisecond)
		for _, id := range rt.Live() {
			rt.Kill(id)
		}
	}()
	res, err := s.Run(ctx, run.Request{Command: &run.Command{Argv: []string{"sleep"}}, Options: run.Options{SessionID: info.ID}}, newRecorder())
	if err != nil || res.Status != run.StatusRuntimeError || !strings.Contains(res.Message, "the session has ended") || res.BundleDigest == "" {
		t.Fatalf("a call whose container ended = %+v, %v; want RUNTIME_ERROR with a bundle", res, err)
	}
	got, err := s.GetSession(ctx, info.ID)
	if err != nil || got.State != session.Failed || !strings.Contains(got.Reason, "ended during a call") {
		t.Fatalf("after the call: %+v %v, want FAILED saying why", got, err)
	}
	if _, err := s.Run(ctx, run.Request{Command: &run.Command{Argv: []string{"echo"}}, Options: run.Options{SessionID: info.ID}}, newRecorder()); err == nil || !strings.Contains(err.Error(), "has ended (FAILED)") {
		t.Fatalf("a call after the end: %v, want a refusal naming the state", err)
	}
}

// TestSessionCallsNameTheirOwnTools calls a tool from two calls of one
// session: the one that declares it gets its answer and counts the call,
// the next, which names no tools, is refused, and CreateSession refuses
// tools outright.
func TestSessionCallsNameTheirOwnTools(t *testing.T) {
	s := newService(t, fake.New(fake.TestProgram), func(c *Config) { c.MaxSessions = 2 })
	ctx := context.Background()
	if _, err := s.CreateSession(ctx, session.Request{Options: run.Options{Tools: []string{"*"}}}); err == nil || !strings.Contains(err.Error(), "options.tools") {
		t.Fatalf("CreateSession with tools = %v, want an error naming options.tools", err)
	}
	info, err := s.CreateSession(ctx, session.Request{})
	if err != nil {
		t.Fatal(err)
	}
	side := tools.CallerSide{Provider: testutil.Adder{}, Tools: []tools.Tool{{Name: "add", Risk: tools.RiskRead,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}}}`)}}}
	req := run.Request{Command: &run.Command{Argv: []string{"testprog", "call", `{"id":1,"op":"call","tool":"caller.add","arguments":{"a":1,"b":2}}`}},
		Options: run.Options{SessionID: info.ID}}
	for _, tc := range []struct {
		name   string
		caller tools.CallerSide
		want   string
	}{
		{"declared", side, `"result":3`},
		{"not named", tools.CallerSide{}, `"kind":"refused"`},
	} {
		rec := newRecorder()
		req.Caller = tc.caller
		res, err := s.Run(ctx, req, rec)
		if err != nil || res.Status != run.StatusOK || !strings.Contains(rec.text(run.Stdout), tc.want) || res.ToolCalls != 1 {
			t.Fatalf("%s: %+v, stdout %q, %v; want OK, one call, and %s", tc.name, res, rec.text(run.Stdout), err, tc.want)
		}
	}
}
