package client

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/server"

	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/tools"
)

type outputs struct {
	mu     sync.Mutex
	stdout bytes.Buffer
}

func (o *outputs) Started(run.Started) error { return nil }
func (o *outputs) Output(s run.Stream, p []byte) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if s == run.Stdout {
		o.stdout.Write(p)
	}
	return nil
}

// TestRunWithToolsAnswersOnTheStream runs a program that calls the
// caller's declared tools over a real gRPC stream: a call answered by the
// caller's function, arguments refused by the schema before the caller
// sees them, a high-risk call declined and then confirmed.
func TestRunWithToolsAnswersOnTheStream(t *testing.T) {
	c := NewClient(startConn(t, fake.TestProgram, server.Options{}, nil))
	var mu sync.Mutex
	var called []string
	declared := []CallerTool{
		{Tool: tools.Tool{Name: "add", Description: "Adds.", Risk: tools.RiskRead,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]}`)},
			Call: func(_ context.Context, args json.RawMessage, key string) (json.RawMessage, error) {
				var in struct{ A, B int }
				json.Unmarshal(args, &in)
				mu.Lock()
				called = append(called, "add "+string(args))
				mu.Unlock()
				return json.Marshal(in.A + in.B)
			}},
		{Tool: tools.Tool{Name: "wipe", Description: "Wipes.", Risk: tools.RiskHigh},
			Call: func(_ context.Context, args json.RawMessage, key string) (json.RawMessage, error) {
				mu.Lock()
				called = append(called, "wipe "+key)
				mu.Unlock()
				return json.RawMessage(`"wiped"`), nil
			}},
	}
	asked := 0
	confirm := func(_ context.Context, tool string, args json.RawMessage) bool {
		asked++
		return asked > 1 // no the first time, yes the second
	}
	call := func(id int, tool, args string) []string {
		return []string{"call", `{"id":` + string(rune('0'+id)) + `,"op":"call","tool":"` + tool + `","arguments":` + args + `}`}
	}
	argv := []string{"testprog"}
	argv = append(argv, call(1, "caller.add", `{"a":2,"b":3}`)...)
	argv = append(argv, call(2, "caller.add", `{"a":"x","b":1}`)...)
	argv = append(argv, call(3, "caller.wipe", `{}`)...)
	argv = append(argv, call(4, "caller.wipe", `{}`)...)
	argv = append(argv, call(5, "caller.nope", `{}`)...)
	obs := &outputs{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.RunWithTools(ctx, run.Request{Command: &run.Command{Argv: argv}}, declared, confirm, obs)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != run.StatusOK || res.ToolCalls != 5 {
		t.Fatalf("status %s, %d tool calls (%s) %s", res.Status, res.ToolCalls, res.Message, obs.stdout.String())
	}
	lines := strings.Split(strings.TrimSpace(obs.stdout.String()), "\n")
	want := []string{`{"id":1,"result":5}`, `"kind":"invalid_arguments"`, `"kind":"declined"`, `{"id":4,"result":"wiped"}`, `"kind":"refused"`}
	if len(lines) != len(want) {
		t.Fatalf("answers %q", lines)
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("answer %d = %s, want %s", i+1, lines[i], w)
		}
	}
	if len(called) != 2 || called[0] != `add {"a":2,"b":3}` || !strings.HasPrefix(called[1], "wipe ") || len(called[1]) != len("wipe ")+32 {
		t.Errorf("the caller's tools ran %q: the valid add, and the confirmed wipe with its key", called)
	}
	if asked != 2 {
		t.Errorf("asked %d confirmations, want 2", asked)
	}
}

// TestRunWithToolsRefusesBadDeclarations names the declared tool that
// is wrong, and starts nothing.
func TestRunWithToolsRefusesBadDeclarations(t *testing.T) {
	c := NewClient(startConn(t, fake.TestProgram, server.Options{}, nil))
	for _, tc := range []struct {
		tool tools.Tool
		want string
	}{
		{tools.Tool{Name: "has space", Risk: tools.RiskRead}, `tools[0]: name "has space"`},
		{tools.Tool{Name: "x", Risk: tools.RiskRead, InputSchema: json.RawMessage(`{"type":`)}, `tools[0] (x): input schema is not JSON`},
		{tools.Tool{Name: "x", Risk: tools.RiskRead, InputSchema: json.RawMessage(`{"$ref":"#/nowhere"}`)}, `tools[0] (x): input schema`},
	} {
		_, err := c.RunWithTools(context.Background(), run.Request{Command: &run.Command{Argv: []string{"testprog"}}}, []CallerTool{{Tool: tc.tool}}, nil, &outputs{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("declared %+v: %v, want %q", tc.tool, err, tc.want)
		}
	}
}
