package tools

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// provider is a provider in the test's process: a read tool and a write.
type provider struct {
	mu    sync.Mutex
	calls []string
}

func (p *provider) Tools(context.Context) ([]Tool, error) {
	return []Tool{
		{Name: "get", Description: "Reads.", Risk: RiskRead, InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`)},
		{Name: "put", Description: "Writes.", Risk: RiskWrite},
	}, nil
}

func (p *provider) Call(_ context.Context, tool string, args json.RawMessage, key string) (json.RawMessage, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, tool+" "+string(args))
	return json.Marshal(fmt.Sprintf("%s %s #%d", tool, args, len(p.calls)))
}

func (p *provider) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.calls)
}

// talk sends each line on a run's channel and returns the answers.
func talk(t *testing.T, r *Channel, lines ...string) []string {
	t.Helper()
	reqR, reqW := io.Pipe()
	ansR, ansW := io.Pipe()
	go func() { r.Serve(reqR, ansW); ansW.Close() }()
	br := bufio.NewReader(ansR)
	var out []string
	for _, l := range lines {
		io.WriteString(reqW, l+"\n")
		a, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, strings.TrimSpace(a))
	}
	reqW.Close()
	io.Copy(io.Discard, br)
	return out
}

func record(t *testing.T, r *Channel) []Call {
	t.Helper()
	var b strings.Builder
	enc := json.NewEncoder(&b)
	for _, c := range r.Calls() {
		enc.Encode(c)
	}
	calls, err := ParseRecord([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return calls
}

// TestReplayAnswersFromTheRecord replays a run's requests without calling
// its provider: the same answers, each saying which bundle's record gave
// it, a request the record lacks refused as not_recorded, and with
// LiveReads the read tool called again.
func TestReplayAnswersFromTheRecord(t *testing.T) {
	p := &provider{}
	reg := NewRegistry(slog.New(slog.DiscardHandler))
	if err := reg.Add("db", p); err != nil {
		t.Fatal(err)
	}
	lines := []string{
		`{"id":1,"op":"list"}`,
		`{"id":2,"op":"describe","tool":"db.get"}`,
		`{"id":3,"op":"call","tool":"db.get","arguments":{"n":1}}`,
		`{"id":4,"op":"call","tool":"db.put","arguments":{"v":"x"}}`,
		`{"id":5,"op":"call","tool":"db.get","arguments":{"n":"bad"}}`,
	}
	cfg := Config{Registry: reg, RunID: "a", Grants: []string{"*"}, Requested: []string{"db.*"}, Limits: DefaultLimits()}
	first := NewChannel(context.Background(), cfg)
	recorded := talk(t, first, lines...)
	if p.count() != 2 {
		t.Fatalf("the provider had %d calls, want 2", p.count())
	}
	rec := record(t, first)
	// An argument of the wrong type is refused in the MCP tools' words.
	if want := `arguments of db.get: n: \"bad\" is a string, want a whole number`; !strings.Contains(recorded[4], want) || !strings.Contains(recorded[4], `"field":"n"`) {
		t.Errorf("the invalid call: %s, want %s about field n", recorded[4], want)
	}

	replay := NewChannel(context.Background(), Config{Registry: reg, RunID: "b", Grants: []string{"*"}, Requested: []string{"db.*"}, Limits: DefaultLimits(), Record: rec, RecordFrom: "sha256:run-a"})
	replayed := talk(t, replay, lines...)
	for i := range lines {
		if recorded[i] != replayed[i] {
			t.Errorf("request %d answered %s in the replay, %s in the run", i+1, replayed[i], recorded[i])
		}
	}
	for _, c := range record(t, replay) {
		if want := c.Outcome != OutcomeInvalid; (c.RecordedFrom == "sha256:run-a") != want {
			t.Errorf("%s %s (%s) recorded from %q; want the record named only where it answered", c.Op, c.Tool, c.Outcome, c.RecordedFrom)
		}
	}
	if p.count() != 2 {
		t.Errorf("the replay called the provider: %d calls", p.count())
	}
	// A request the program did not make in the run.
	other := NewChannel(context.Background(), Config{Registry: reg, RunID: "c", Grants: []string{"*"}, Requested: []string{"db.*"}, Limits: DefaultLimits(), Record: rec})
	got := talk(t, other, `{"id":7,"op":"call","tool":"db.get","arguments":{"n":2}}`)
	if !strings.Contains(got[0], `"kind":"not_recorded"`) {
		t.Errorf("an unrecorded request: %s", got[0])
	}
	// --live-tools: the read is called again, the write still answered.
	live := NewChannel(context.Background(), Config{Registry: reg, RunID: "d", Grants: []string{"*"}, Requested: []string{"db.*"}, Limits: DefaultLimits(), Record: rec, LiveReads: true})
	got = talk(t, live, lines[2], lines[3])
	if got[0] != `{"id":3,"result":"get {\"n\":1} #3"}` || got[1] != recorded[3] {
		t.Errorf("live reads: %q", got)
	}
	if p.count() != 3 {
		t.Errorf("the provider had %d calls, want 3: the read again, not the write", p.count())
	}
}

// TestRecordAnswersOnlyWhatTheGatesPass is the fourth review's forged
// record: answers for a tool no server registers, for one the tenant is
// not granted, and for arguments the schema refuses, all "ok" in the
// record with no confirmation gate. Each is refused by its gate, as live,
// and audited; only the call that passes them is answered from the
// record, which the audit's line names.
func TestRecordAnswersOnlyWhatTheGatesPass(t *testing.T) {
	p := &provider{}
	reg := NewRegistry(slog.New(slog.DiscardHandler))
	if err := reg.Add("db", p); err != nil {
		t.Fatal(err)
	}
	forged := []Call{
		{Op: "call", Tool: "shop.refund", ArgumentsDigest: digestOf(`{"id":"Z-9"}`), Outcome: OutcomeOK, Result: json.RawMessage(`{"refunded":"Z-9"}`)},
		{Op: "call", Tool: "db.put", ArgumentsDigest: digestOf(`{"v":"x"}`), Outcome: OutcomeOK, Result: json.RawMessage(`"forged put"`)},
		{Op: "call", Tool: "db.get", ArgumentsDigest: digestOf(`{"n":"bad"}`), Outcome: OutcomeOK, Result: json.RawMessage(`"forged get"`)},
		{Op: "call", Tool: "db.get", ArgumentsDigest: digestOf(`{"n":1}`), Outcome: OutcomeOK, Result: json.RawMessage(`"recorded get"`)},
	}
	var audited []Call
	var mu sync.Mutex
	ch := NewChannel(context.Background(), Config{Registry: reg, RunID: "r", Grants: []string{"db.get"}, Requested: []string{"*"}, Limits: DefaultLimits(),
		Record: forged, RecordFrom: "sha256:forged", Audit: func(c Call) { mu.Lock(); audited = append(audited, c); mu.Unlock() }})
	got := talk(t, ch,
		`{"id":1,"op":"call","tool":"shop.refund","arguments":{"id":"Z-9"}}`,
		`{"id":2,"op":"call","tool":"db.put","arguments":{"v":"x"}}`,
		`{"id":3,"op":"call","tool":"db.get","arguments":{"n":"bad"}}`,
		`{"id":4,"op":"call","tool":"db.get","arguments":{"n":1}}`)
	for i, want := range []string{`"kind":"refused","message":"no tool \"shop.refund\"`, `"kind":"refused","message":"tool db.put is not granted to the tenant"`, `"kind":"invalid_arguments"`, `"result":"recorded get"`} {
		if !strings.Contains(got[i], want) {
			t.Errorf("request %d: %s; want %s", i+1, got[i], want)
		}
	}
	if p.count() != 0 {
		t.Errorf("the provider was called %d times in a replay", p.count())
	}
	calls := record(t, ch)
	for i, gate := range []string{GateRegistry, GatePermission, GateValidation, ""} {
		c := calls[i]
		refused := ""
		for _, g := range c.Gates {
			if g.Decision == "refuse" {
				refused = g.Gate
			}
		}
		if refused != gate || (c.RecordedFrom != "") != (gate == "") {
			t.Errorf("call %d (%s): refused by %q, recorded from %q; want %q, and the record named only when it answered", i+1, c.Tool, refused, c.RecordedFrom, gate)
		}
	}
	if len(audited) != 4 || audited[3].RecordedFrom != "sha256:forged" {
		t.Errorf("audited %d calls (%+v); want all four, the answered one naming its record", len(audited), audited)
	}
}

// digestOf is the arguments' digest a record names a call by.
func digestOf(args string) string {
	sum := sha256.Sum256([]byte(args))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func TestKeysNameTheCallOfTheRun(t *testing.T) {
	k := func(tenant, key, run string, seq int) string {
		return NewChannel(context.Background(), Config{Tenant: tenant, Key: key, RunID: run}).key(seq)
	}
	if k("t", "K", "r1", 1) != k("t", "K", "r2", 1) {
		t.Error("a retried keyed run gives its calls other keys")
	}
	for _, other := range []string{k("t", "K", "r1", 2), k("u", "K", "r1", 1), k("t", "L", "r1", 1), k("t", "", "r1", 1)} {
		if other == k("t", "K", "r1", 1) {
			t.Error("two different calls share a key")
		}
	}
	if k("t", "", "r1", 1) == k("t", "", "r2", 1) {
		t.Error("two runs without a key share their calls' keys")
	}
}

func TestNamesAndPatterns(t *testing.T) {
	for _, n := range []string{"orders", "a1_b-c"} {
		if err := ValidName(n); err != nil {
			t.Errorf("ValidName(%q) = %v", n, err)
		}
	}
	for _, n := range []string{"", "Orders", "1x", "a.b", strings.Repeat("a", 65)} {
		if ValidName(n) == nil {
			t.Errorf("ValidName(%q) passed", n)
		}
	}
	for _, c := range []struct {
		patterns []string
		name     string
		want     bool
	}{
		{[]string{"orders.*"}, "orders.search", true},
		{[]string{"orders.search"}, "orders.refund", false},
		{[]string{"*"}, "billing.pay", true},
		{nil, "orders.search", false},
		{[]string{"orders.*"}, "ordersx.search", false},
	} {
		if got := Matches(c.patterns, c.name); got != c.want {
			t.Errorf("Matches(%q, %q) = %v", c.patterns, c.name, got)
		}
	}
}

func TestMetricsCountCallsByToolAndOutcome(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	p := &provider{}
	tools := NewRegistry(slog.New(slog.DiscardHandler))
	tools.Add("db", p)
	r := NewChannel(context.Background(), Config{Registry: tools, RunID: "m", Grants: []string{"*"}, Requested: []string{"db.get"}, Limits: DefaultLimits(), Metrics: m})
	talk(t, r,
		`{"id":1,"op":"call","tool":"db.get","arguments":{"n":1}}`,
		`{"id":2,"op":"call","tool":"db.get","arguments":{"n":"x"}}`,
		`{"id":3,"op":"call","tool":"db.put","arguments":{}}`,
		`{"id":4,"op":"call","tool":"nope.x","arguments":{}}`,
	)
	for _, c := range []struct {
		tool, outcome string
		want          float64
	}{
		{"db.get", "ok", 1}, {"db.get", "invalid_arguments", 1}, {"db.put", "refused", 1}, {"unregistered", "refused", 1},
	} {
		if got := testutil.ToFloat64(m.calls.WithLabelValues(c.tool, c.outcome)); got != c.want {
			t.Errorf("calls{%s,%s} = %v, want %v", c.tool, c.outcome, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.duration); n != 1 {
		t.Errorf("%d latency series, want 1: only calls that reached their provider are timed", n)
	}
}

// blocker is a provider whose one tool answers only when its context ends.
type blocker struct{}

func (blocker) Tools(context.Context) ([]Tool, error) {
	return []Tool{{Name: "wait", Risk: RiskRead}}, nil
}

func (blocker) Call(ctx context.Context, _ string, _ json.RawMessage, _ string) (json.RawMessage, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestCallsEndWithTheChannel ends a program's channel while its call
// waits at the provider: the call is cut off at once, not at its
// timeout, recorded as cancelled, and Settled returns.
func TestCallsEndWithTheChannel(t *testing.T) {
	reg := NewRegistry(slog.New(slog.DiscardHandler))
	reg.Add("slow", blocker{})
	r := NewChannel(context.Background(), Config{Registry: reg, RunID: "c", Grants: []string{"*"}, Requested: []string{"*"}, Limits: DefaultLimits()})
	reqR, reqW := io.Pipe()
	go r.Serve(reqR, io.Discard)
	io.WriteString(reqW, `{"id":1,"op":"call","tool":"slow.wait","arguments":{}}`+"\n")
	start := time.Now()
	reqW.Close()
	r.Settled()
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the call ended %v after its channel", took)
	}
	calls := r.Calls()
	if len(calls) != 1 || calls[0].Outcome != OutcomeCancelled {
		t.Errorf("recorded %+v, want one cancelled call", calls)
	}
	// A run whose program never had a channel settles at once.
	NewChannel(context.Background(), Config{}).Settled()
}
