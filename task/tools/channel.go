package tools

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/internal/schemacheck"
)

// Limits bound a run's calls.
type Limits struct {
	// Calls is how many calls a run may make; RequestBytes bounds one
	// request line, ResultBytes one result.
	Calls        int
	RequestBytes int
	ResultBytes  int
	// CallTimeout bounds a call at its provider; ConfirmTimeout the wait
	// for a confirmation.
	CallTimeout    time.Duration
	ConfirmTimeout time.Duration
	// InFlight is how many calls of a run may run at once.
	InFlight int
}

// DefaultLimits are the limits a daemon starts with.
func DefaultLimits() Limits {
	return Limits{Calls: 200, RequestBytes: 256 << 10, ResultBytes: 1 << 20, CallTimeout: 30 * time.Second, ConfirmTimeout: time.Minute, InFlight: 4}
}

// Confirmer asks a run's caller to confirm a high-risk call.
type Confirmer interface {
	Confirm(ctx context.Context, c Call) (bool, error)
}

// Outcomes of a call, as the program sees them (the kind of its error)
// and as the record and the audit log name them.
const (
	OutcomeOK                = "ok"
	OutcomeRefused           = "refused"            // not registered, or not granted
	OutcomeInvalid           = "invalid_arguments"  // the schema refused the arguments
	OutcomeNeedsConfirmation = "needs_confirmation" // high risk, and no one to ask
	OutcomeDeclined          = "declined"           // the caller said no, or did not answer in time
	OutcomeFailed            = "failed"             // the tool ran and failed, or its provider did
	OutcomeTimedOut          = "timed_out"
	OutcomeLimit             = "limit" // a limit of the run's calls
	OutcomeBadRequest        = "bad_request"
	// OutcomeCancelled is a call cut off by its program's end (or its
	// run's): no one waits for its answer.
	OutcomeCancelled = "cancelled"
	// OutcomeNotRecorded is a replay's answer to a request that its
	// record does not hold: the program asked something different.
	OutcomeNotRecorded = "not_recorded"
)

// The six gates, as the record names them.
const (
	GateRegistry     = "registry"
	GatePermission   = "permission"
	GateValidation   = "validation"
	GateConfirmation = "confirmation"
	GateIdempotency  = "idempotency"
	GateAudit        = "audit"
)

// Call is the record of one request on a run's channel: what the program
// asked, what each gate decided, and the answer.
type Call struct {
	Seq int `json:"seq"`
	// Op is "call", "list" or "describe".
	Op   string `json:"op"`
	Tool string `json:"tool,omitempty"`
	// Arguments are the call's, with what the tool's schema marks
	// sensitive (writeOnly) replaced by its digest; ArgumentsDigest is
	// the SHA-256 of the arguments as sent.
	Arguments       json.RawMessage `json:"arguments,omitempty"`
	ArgumentsDigest string          `json:"arguments_digest,omitempty"`
	Risk            Risk            `json:"risk,omitempty"`
	Key             string          `json:"idempotency_key,omitempty"`
	Gates           []Gate          `json:"gates,omitempty"`
	Outcome         string          `json:"outcome"`
	Result          json.RawMessage `json:"result,omitempty"`
	Error           string          `json:"error,omitempty"`
	Field           string          `json:"field,omitempty"`
	// AtMillis is when the request came, from the channel's start.
	AtMillis       int64   `json:"at_ms"`
	DurationMillis float64 `json:"duration_ms"`
	// RecordedFrom, in a replay, names the bundle whose record answered
	// the request instead of its tool.
	RecordedFrom string `json:"recorded_from,omitempty"`
}

// Gate is one gate's decision on a call: "pass" or "refuse".
type Gate struct {
	Gate     string `json:"gate"`
	Decision string `json:"decision"`
}

// Config is what a run's channel needs.
type Config struct {
	Registry *Registry
	// RunID and Tenant name the run; Key is its idempotency key, or
	// empty, from which each call's key is derived.
	RunID, Tenant, Key string
	// Grants are the tenant's tool patterns; Requested the request's.
	// A tool must match both.
	Grants, Requested []string
	Limits            Limits
	// Confirmer asks for high-risk calls; nil refuses them.
	Confirmer Confirmer
	// Caller is the run's caller's own tools, granted by declaring them.
	Caller CallerSide
	// Audit is told of every call once it has an answer; Metrics counts
	// them. Either may be nil.
	Audit   func(Call)
	Metrics *Metrics
	// Record, for a replay of the bundle RecordFrom, holds the recorded
	// run's requests: a request that passes the registry, permission and
	// validation gates, as a live one must, is answered as the record
	// answered the same one (same op, tool and arguments), never by a
	// live tool, so that the replay runs offline; one the record lacks is
	// answered not_recorded. With LiveReads, read-only tools are called
	// again instead. The caller's tools are those it declares again
	// (Caller.Tools), with no Provider: the record answers them.
	// RecordedSpecs are the tools as the replayed run's daemon resolved
	// them, read from its bundle by this daemon: a caller's tool the
	// replay does not declare again, and an operator's whose provider is
	// registered but does not answer, are held to them.
	Record        []Call
	RecordFrom    string
	RecordedSpecs []Tool
	LiveReads     bool
}

// Channel is one run's tool channel (a runtime.Tools): the six gates
// between its program and the tools it calls, and the record of its calls.
type Channel struct {
	cfg Config
	// ctx ends the calls under way once the channel has ended.
	ctx      context.Context
	endCalls context.CancelFunc
	start    time.Time
	// began is set once Serve runs, and done closed when it returned.
	began atomic.Bool
	done  chan struct{}

	mu       sync.Mutex
	calls    []Call
	seq      int // calls made, which numbers their keys
	inFlight int
	wg       sync.WaitGroup
	// used marks the entries of cfg.Record a replay has answered with.
	used []bool
	// specs are the tools the registry gate passed, by full name.
	specs map[string]Tool
}

// NewChannel makes the channel of a run, whose calls end with ctx.
func NewChannel(ctx context.Context, cfg Config) *Channel {
	r := &Channel{cfg: cfg, start: time.Now(), used: make([]bool, len(cfg.Record)), done: make(chan struct{})}
	r.ctx, r.endCalls = context.WithCancel(ctx)
	return r
}

// Settled waits until Serve, if it ran, has returned: every request the
// program made is then in Calls.
func (r *Channel) Settled() {
	if r.began.Load() {
		<-r.done
	}
}

// request is one line of the program's.
type request struct {
	ID        json.RawMessage `json:"id"`
	Op        string          `json:"op"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
}

// answer is one line to the program.
type answer struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result,omitempty"`
	Tools  []Tool          `json:"tools,omitempty"`
	Tool   *Tool           `json:"tool,omitempty"`
	Error  *answerError    `json:"error,omitempty"`
}

type answerError struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

// Serve answers the program's requests, one JSON object a line, until
// requests ends; then it waits for the calls under way.
func (r *Channel) Serve(requests io.Reader, answers io.Writer) {
	r.began.Store(true)
	defer close(r.done)
	// The channel ends with the program: calls under way are cut off.
	defer r.wg.Wait()
	defer r.endCalls()
	br := bufio.NewReaderSize(requests, 64<<10)
	for {
		line, tooLong, err := readLine(br, r.cfg.Limits.RequestBytes)
		if tooLong {
			r.refuse(answers, nil, "", OutcomeLimit, fmt.Sprintf("a request of more than %d bytes", r.cfg.Limits.RequestBytes))
		} else if len(line) > 0 {
			r.take(line, answers)
		}
		if err != nil {
			return
		}
	}
}

// readLine reads one line, without its newline; a line over limit is
// read to its end and dropped.
func readLine(br *bufio.Reader, limit int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > limit+1 {
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if n := len(line); n > 0 && line[n-1] == '\n' {
			line = line[:n-1]
		}
		return line, tooLong, err
	}
}

// take answers one request line: list and describe at once, a call in
// its own goroutine.
func (r *Channel) take(line []byte, answers io.Writer) {
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		r.refuse(answers, nil, "", OutcomeBadRequest, "a request that is not a JSON object: "+err.Error())
		return
	}
	if r.cfg.Record != nil && r.replayed(req, answers) {
		return
	}
	switch req.Op {
	case "list":
		listed := r.listed()
		r.send(answers, answer{ID: req.ID, Tools: listed})
		res, _ := json.Marshal(listed)
		r.keep(Call{Op: "list", Outcome: OutcomeOK, Result: res, AtMillis: time.Since(r.start).Milliseconds()})
	case "describe":
		r.describe(req, answers)
	case "call":
		r.mu.Lock()
		made := r.seq
		full := r.inFlight >= r.cfg.Limits.InFlight
		if made < r.cfg.Limits.Calls && !full {
			r.seq++
			r.inFlight++
		}
		r.mu.Unlock()
		switch {
		case made >= r.cfg.Limits.Calls:
			r.refuse(answers, req.ID, req.Tool, OutcomeLimit, fmt.Sprintf("the run made its %d calls", r.cfg.Limits.Calls))
		case full:
			r.refuse(answers, req.ID, req.Tool, OutcomeLimit, fmt.Sprintf("%d calls are under way already", r.cfg.Limits.InFlight))
		default:
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				c := r.call(made+1, req)
				r.mu.Lock()
				r.inFlight--
				r.mu.Unlock()
				r.answer(answers, req.ID, c)
			}()
		}
	default:
		r.refuse(answers, req.ID, req.Tool, OutcomeBadRequest, fmt.Sprintf("op %q: want call, list or describe", req.Op))
	}
}

// listed is what the run may call, by name and one line each: the schema
// comes with describe.
func (r *Channel) listed() []Tool {
	tools := r.cfg.Registry.Granted(r.ctx, r.cfg.Requested)
	out := make([]Tool, 0, len(tools)+len(r.cfg.Caller.Tools))
	for _, t := range tools {
		if Matches(r.cfg.Grants, t.Name) {
			t.InputSchema = nil
			out = append(out, t)
		}
	}
	for _, t := range r.cfg.Caller.Tools {
		t.Name, t.InputSchema = CallerProvider+"."+t.Name, nil
		out = append(out, t)
	}
	return out
}

func (r *Channel) describe(req request, answers io.Writer) {
	c := Call{Op: "describe", Tool: req.Tool, AtMillis: time.Since(r.start).Milliseconds()}
	e, outcome, msg := r.admit(req.Tool, &c)
	if e == nil {
		r.refuse(answers, req.ID, req.Tool, outcome, msg)
		c.Outcome, c.Error = outcome, msg
	} else {
		t := e.Tool
		r.send(answers, answer{ID: req.ID, Tool: &t})
		c.Outcome, c.Result = OutcomeOK, mustJSON(t)
	}
	r.keep(c)
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// admit passes a request through the first two gates: the tool is
// registered, and granted to the tenant and the request.
func (r *Channel) admit(name string, c *Call) (*entry, string, string) {
	if isCallers(name) && r.cfg.Caller.Provider != nil {
		e, err := find(name, strings.TrimPrefix(name, CallerProvider+"."), r.cfg.Caller.Tools, callerTools{r.cfg.Caller})
		if err != nil {
			c.Gates = append(c.Gates, Gate{GateRegistry, "refuse"})
			return nil, OutcomeRefused, err.Error()
		}
		// The caller declared it for this run: that is its grant.
		c.Gates = append(c.Gates, Gate{GateRegistry, "pass"}, Gate{GatePermission, "pass"})
		r.remember(e)
		return e, "", ""
	}
	e, err := r.cfg.Registry.lookup(r.ctx, name)
	if err != nil {
		c.Gates = append(c.Gates, Gate{GateRegistry, "refuse"})
		return nil, OutcomeRefused, err.Error()
	}
	c.Gates = append(c.Gates, Gate{GateRegistry, "pass"})
	r.remember(e)
	return r.permit(e, name, c)
}

// remember keeps the tool of e as the registry gate passed it: the
// bundle records it, and a replay offline holds its calls to it.
func (r *Channel) remember(e *entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.specs == nil {
		r.specs = map[string]Tool{}
	}
	r.specs[e.Name] = e.Tool
}

// Specs are the tools the run's requests named that passed the registry
// gate, by name, with their schemas.
func (r *Channel) Specs() []Tool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Tool, 0, len(r.specs))
	for _, name := range slices.Sorted(maps.Keys(r.specs)) {
		out = append(out, r.specs[name])
	}
	return out
}

// permit is the permission gate of the operator's tool name: granted to
// the tenant and named by the request.
func (r *Channel) permit(e *entry, name string, c *Call) (*entry, string, string) {
	if !Matches(r.cfg.Grants, name) || !Matches(r.cfg.Requested, name) {
		c.Gates = append(c.Gates, Gate{GatePermission, "refuse"})
		who := "the request"
		if !Matches(r.cfg.Grants, name) {
			who = "the tenant"
		}
		return nil, OutcomeRefused, fmt.Sprintf("tool %s is not granted to %s", name, who)
	}
	c.Gates = append(c.Gates, Gate{GatePermission, "pass"})
	return e, "", ""
}

// call passes one call through the six gates and calls its tool.
func (r *Channel) call(seq int, req request) Call {
	at := time.Now()
	c := Call{Seq: seq, Op: "call", Tool: req.Tool, AtMillis: at.Sub(r.start).Milliseconds()}
	sum := sha256.Sum256(req.Arguments)
	c.ArgumentsDigest = "sha256:" + hex.EncodeToString(sum[:])
	defer func() {
		c.DurationMillis = float64(time.Since(at).Microseconds()) / 1000
		c.Gates = append(c.Gates, Gate{GateAudit, "pass"})
		if r.cfg.Audit != nil {
			r.cfg.Audit(c)
		}
		r.cfg.Metrics.observe(c)
		r.keep(c)
	}()
	e, outcome, msg := r.admit(req.Tool, &c)
	if e == nil {
		c.Outcome, c.Error, c.Arguments = outcome, msg, redact(req.Arguments, nil)
		return c
	}
	c.Risk = e.Risk
	c.Arguments = redact(req.Arguments, e.InputSchema)
	if outcome, field, msg := validate(e, req); outcome != "" {
		c.Gates = append(c.Gates, Gate{GateValidation, "refuse"})
		c.Outcome, c.Field, c.Error = outcome, field, msg
		return c
	}
	c.Gates = append(c.Gates, Gate{GateValidation, "pass"})
	if e.Risk == RiskHigh {
		if ok, outcome, msg := r.confirm(c); !ok {
			c.Gates = append(c.Gates, Gate{GateConfirmation, "refuse"})
			c.Outcome, c.Error = outcome, msg
			return c
		}
	}
	c.Gates = append(c.Gates, Gate{GateConfirmation, "pass"})
	c.Key = r.key(seq)
	c.Gates = append(c.Gates, Gate{GateIdempotency, "pass"})
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.Limits.CallTimeout)
	defer cancel()
	_, tool, _ := strings.Cut(req.Tool, ".")
	raw := req.Arguments
	if len(raw) == 0 {
		raw = json.RawMessage("{}")
	}
	res, err := e.provider.Call(ctx, tool, raw, c.Key)
	var failure *Failure
	switch {
	case errors.As(err, &failure):
		c.Outcome, c.Error = OutcomeFailed, failure.Message
	case r.ctx.Err() != nil:
		c.Outcome, c.Error = OutcomeCancelled, fmt.Sprintf("the program ended before %s answered", req.Tool)
	case ctx.Err() != nil:
		c.Outcome, c.Error = OutcomeTimedOut, fmt.Sprintf("%s did not answer within %s", req.Tool, r.cfg.Limits.CallTimeout)
	case err != nil:
		c.Outcome, c.Error = OutcomeFailed, fmt.Sprintf("%s: %v", req.Tool, err)
	case len(res) > r.cfg.Limits.ResultBytes:
		c.Outcome, c.Error = OutcomeLimit, fmt.Sprintf("%s answered %d bytes, over the %d a result may have", req.Tool, len(res), r.cfg.Limits.ResultBytes)
	default:
		c.Outcome, c.Result = OutcomeOK, res
	}
	return c
}

// validate is the validation gate: the call's arguments against its
// tool's schema. It returns the outcome, the field at fault and why, or
// no outcome when they pass.
func validate(e *entry, req request) (outcome, field, msg string) {
	var args any = map[string]any{}
	if len(req.Arguments) > 0 {
		if err := json.Unmarshal(req.Arguments, &args); err != nil {
			return OutcomeInvalid, "", "arguments: " + err.Error()
		}
	}
	if err := e.schema.Validate(args); err != nil {
		// The words of the MCP tools' refusals where the check knows the
		// schema's parts, the validator's where it does not.
		if msg := schemacheck.Check(req.Tool, args, e.schema.Schema()); msg != "" {
			field, _, _ := strings.Cut(msg, ":")
			return OutcomeInvalid, topField(field), fmt.Sprintf("arguments of %s: %s", req.Tool, msg)
		}
		return OutcomeInvalid, fieldOf(err), fmt.Sprintf("arguments of %s: %v", req.Tool, err)
	}
	return "", "", ""
}

// topField is the argument a path into the arguments starts with:
// files[0].path is about files.
func topField(path string) string {
	if i := strings.IndexAny(path, ".["); i >= 0 {
		return path[:i]
	}
	return path
}

// confirm asks the run's caller about a high-risk call, within the
// limit's time.
func (r *Channel) confirm(c Call) (bool, string, string) {
	if r.cfg.Confirmer == nil {
		return false, OutcomeNeedsConfirmation, fmt.Sprintf("%s needs the caller's confirmation, and this run's caller cannot be asked", c.Tool)
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.Limits.ConfirmTimeout)
	defer cancel()
	ok, err := r.cfg.Confirmer.Confirm(ctx, c)
	switch {
	case r.ctx.Err() != nil:
		return false, OutcomeCancelled, fmt.Sprintf("the program ended while %s waited for confirmation", c.Tool)
	case err != nil && ctx.Err() != nil:
		return false, OutcomeDeclined, fmt.Sprintf("the caller did not confirm %s within %s", c.Tool, r.cfg.Limits.ConfirmTimeout)
	case err != nil:
		return false, OutcomeDeclined, fmt.Sprintf("confirming %s: %v", c.Tool, err)
	case !ok:
		return false, OutcomeDeclined, fmt.Sprintf("the caller declined %s", c.Tool)
	}
	return true, "", ""
}

// key is the idempotency key of the run's seq-th call: the same for the
// same call of a retried run (same tenant and idempotency key), another
// for any other run.
func (r *Channel) key(seq int) string {
	base := r.cfg.Key
	if base == "" {
		base = "run:" + r.cfg.RunID
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%d", r.cfg.Tenant, base, seq))
	return hex.EncodeToString(sum[:16])
}

var schemaPath = regexp.MustCompile(`/properties/([^/: ]+)`)
var missing = regexp.MustCompile(`missing properties: \["?([^"\]]+)`)

// fieldOf names the argument a validation error is about, when it says.
func fieldOf(err error) string {
	if m := missing.FindStringSubmatch(err.Error()); m != nil {
		return m[1]
	}
	if m := schemaPath.FindStringSubmatch(err.Error()); m != nil {
		return m[1]
	}
	return ""
}

// redact replaces the top-level arguments that schema marks writeOnly
// (JSON Schema's word for a secret the caller sends) by their digest.
func redact(args, schema json.RawMessage) json.RawMessage {
	var s struct {
		Properties map[string]struct {
			WriteOnly bool `json:"writeOnly"`
		} `json:"properties"`
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(schema, &s) != nil || json.Unmarshal(args, &obj) != nil {
		return args
	}
	changed := false
	for k, p := range s.Properties {
		if v, ok := obj[k]; ok && p.WriteOnly {
			sum := sha256.Sum256(v)
			obj[k], _ = json.Marshal("redacted sha256:" + hex.EncodeToString(sum[:]))
			changed = true
		}
	}
	if !changed {
		return args
	}
	out, _ := json.Marshal(obj)
	return out
}

func (r *Channel) answer(answers io.Writer, id json.RawMessage, c Call) {
	if c.Outcome == OutcomeOK {
		r.send(answers, answer{ID: id, Result: c.Result})
		return
	}
	r.send(answers, answer{ID: id, Error: &answerError{Kind: c.Outcome, Message: c.Error, Field: c.Field}})
}

// refuse answers a request that never became a call, and records it.
func (r *Channel) refuse(answers io.Writer, id json.RawMessage, tool, outcome, msg string) {
	r.send(answers, answer{ID: id, Error: &answerError{Kind: outcome, Message: msg}})
	r.keep(Call{Op: "call", Tool: tool, Outcome: outcome, Error: msg, AtMillis: time.Since(r.start).Milliseconds()})
}

func (r *Channel) send(answers io.Writer, a answer) {
	if len(a.ID) == 0 {
		a.ID = json.RawMessage("null")
	}
	b, err := json.Marshal(a)
	if err != nil {
		b, _ = json.Marshal(answer{ID: a.ID, Error: &answerError{Kind: OutcomeFailed, Message: "the answer could not be encoded: " + err.Error()}})
	}
	// A program that stopped reading stalls only its own channel.
	_, _ = answers.Write(append(b, '\n'))
}

// keepMax bounds the record of a run's requests: past it they are
// counted, not kept.
const keepMax = 10000

func (r *Channel) keep(c Call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.calls) < keepMax {
		r.calls = append(r.calls, c)
	}
}

// Calls is the record of the run's requests, in the order their answers
// were made; complete once Settled returned.
func (r *Channel) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Call(nil), r.calls...)
}

// Made is how many calls the run made (calls past the registry's and
// the limits' refusals included: every request to call).
func (r *Channel) Made() int {
	n := 0
	for _, c := range r.Calls() {
		if c.Op == "call" {
			n++
		}
	}
	return n
}
