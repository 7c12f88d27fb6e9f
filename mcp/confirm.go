package mcp

import (
	"context"
	"fmt"
	"sync"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	sbtools "github.com/sandboxd/sandboxd/task/tools"
)

// hostConfirmer asks the MCP host, by elicitation, whether a program's
// high-risk tool call may go on: the host shows the question to its user.
type hostConfirmer struct{ session *mcpsdk.ServerSession }

// hostConfirmerOf is the confirmer of a tool call's host when it is
// asked by elicitation requests, or nil. A host asks to be asked by
// declaring elicitation; on 2026-07-28 a server may no longer send it a
// request while serving one, so such hosts are asked through the call's
// answers instead (asksHost); one that cannot be asked gets high-risk
// calls refused as needs_confirmation.
func hostConfirmerOf(req *mcpsdk.CallToolRequest) *hostConfirmer {
	if req == nil || req.Session == nil {
		return nil
	}
	p := req.Session.InitializeParams()
	if p == nil || p.Capabilities == nil || p.Capabilities.Elicitation == nil || p.ProtocolVersion >= statelessRevision {
		return nil
	}
	return &hostConfirmer{req.Session}
}

// statelessRevision is the first MCP revision whose servers send no
// requests of their own while serving one.
const statelessRevision = "2026-07-28"

// confirmSchema is the one answer asked for: allow or not.
var confirmSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"allow": map[string]any{"type": "boolean", "title": "Allow this call", "default": false},
	},
	"required": []string{"allow"},
}

func (h *hostConfirmer) Confirm(ctx context.Context, c sbtools.Call) (bool, error) {
	res, err := h.session.Elicit(ctx, &mcpsdk.ElicitParams{
		Message:         question(c),
		RequestedSchema: confirmSchema,
	})
	if err != nil {
		return false, err
	}
	allow, _ := res.Content["allow"].(bool)
	return res.Action == "accept" && allow, nil
}

// A 2026-07-28 host is asked through its call's answer instead: while
// the call waits, an input-required result whose inputRequests ask the
// question and whose requestState names the run; the host's retry with
// the answers gives them to the program and follows the run again. Once
// the run is a task, tasks/get shows the question (input_required) and
// tasks/update answers it. Either way the answer is the host's user's,
// as with elicitation.

// asksHost reports whether a call's host is asked through its answers: a
// 2026-07-28 request that declares elicitation.
func asksHost(req *mcpsdk.CallToolRequest) bool {
	if req == nil || req.Params == nil || req.ProtocolVersion() < statelessRevision {
		return false
	}
	caps := req.ClientCapabilities()
	return caps != nil && caps.Elicitation != nil
}

// asks are the questions a run waits on.
type asks struct {
	mu      sync.Mutex
	waiting map[string]*ask
	ready   chan struct{} // closed while a question waits
}

type ask struct {
	call   sbtools.Call
	answer chan bool
}

func newAsks() *asks { return &asks{waiting: map[string]*ask{}, ready: make(chan struct{})} }

// Confirm waits for the host's answer to the question of call c. Its key
// is unique over the run, as both mechanisms require: the call's number.
func (a *asks) Confirm(ctx context.Context, c sbtools.Call) (bool, error) {
	key := fmt.Sprintf("confirm-%d", c.Seq)
	q := &ask{call: c, answer: make(chan bool, 1)}
	a.mu.Lock()
	if len(a.waiting) == 0 {
		close(a.ready)
	}
	a.waiting[key] = q
	a.mu.Unlock()
	defer a.drop(key)
	select {
	case ok := <-q.answer:
		return ok, nil
	case <-ctx.Done():
		return false, context.Cause(ctx)
	}
}

func (a *asks) drop(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.dropLocked(key)
}

func (a *asks) dropLocked(key string) {
	if _, ok := a.waiting[key]; !ok {
		return
	}
	delete(a.waiting, key)
	if len(a.waiting) == 0 {
		a.ready = make(chan struct{})
	}
}

// asked is closed while a question waits.
func (a *asks) asked() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ready
}

// requests are the waiting questions, as elicitations.
func (a *asks) requests() mcpsdk.InputRequestMap {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.waiting) == 0 {
		return nil
	}
	m := mcpsdk.InputRequestMap{}
	for key, q := range a.waiting {
		m[key] = &mcpsdk.ElicitParams{Mode: "form", Message: question(q.call), RequestedSchema: confirmSchema}
	}
	return m
}

// answer gives the program the host's answers; one to a question that
// does not wait (answered, never asked, or past) is ignored.
func (a *asks) answer(responses mcpsdk.InputResponseMap) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for key, r := range responses {
		q := a.waiting[key]
		if q == nil {
			continue
		}
		res, _ := r.(*mcpsdk.ElicitResult)
		allow, _ := res.Content["allow"].(bool)
		q.answer <- res != nil && res.Action == "accept" && allow
		a.dropLocked(key)
	}
}

// question is what the host's user is asked about call c.
func question(c sbtools.Call) string {
	return fmt.Sprintf("A program in the sandbox asks to call %s, a high-risk tool, with the arguments %s. Allow this one call?", c.Tool, c.Arguments)
}

// askBoard finds the questions of a run by its id, for the retries and
// task requests that answer them.
type askBoard struct {
	mu    sync.Mutex
	byRun map[string]*asks
}

func (b *askBoard) put(id string, a *asks) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byRun == nil {
		b.byRun = map[string]*asks{}
	}
	b.byRun[id] = a
}

func (b *askBoard) get(id string) *asks {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.byRun[id]
}

func (b *askBoard) forget(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.byRun, id)
}

// boardConfirmer is a run's confirmer for a host asked through answers:
// at the first question it puts the run's asks on the board, under the
// run's id, which the call's observer may learn a moment after the
// program's first request.
type boardConfirmer struct {
	*asks
	board *askBoard
	obs   *observer
}

func (c boardConfirmer) Confirm(ctx context.Context, call sbtools.Call) (bool, error) {
	select {
	case <-c.obs.started:
	case <-ctx.Done():
		return false, context.Cause(ctx)
	}
	c.board.put(c.obs.runID(), c.asks)
	return c.asks.Confirm(ctx, call)
}
