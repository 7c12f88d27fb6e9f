package tools

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// ParseRecord reads a bundle's tool_calls.jsonl.
func ParseRecord(b []byte) ([]Call, error) {
	var out []Call
	dec := json.NewDecoder(bytes.NewReader(b))
	for n := 1; ; n++ {
		var c Call
		if err := dec.Decode(&c); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("tool record, entry %d: %w", n, err)
		}
		out = append(out, c)
	}
}

// replayed answers req from the record when it is a replay's to answer,
// and says whether it did: with LiveReads, a read-only tool's call is
// left to the live path. The record answers only what passes the
// registry, permission and validation gates, as a live request must; each
// answer it gives says so (RecordedFrom), and goes to the audit.
func (r *Channel) replayed(req request, answers io.Writer) bool {
	at := time.Now()
	digest := ""
	if req.Op == "call" {
		sum := sha256.Sum256(req.Arguments)
		digest = "sha256:" + hex.EncodeToString(sum[:])
	}
	r.mu.Lock()
	i := -1
	for j, c := range r.cfg.Record {
		if !r.used[j] && c.Op == req.Op && c.Tool == req.Tool && c.ArgumentsDigest == digest {
			i = j
			break
		}
	}
	if i >= 0 && r.cfg.LiveReads && req.Op == "call" && r.cfg.Record[i].Risk == RiskRead {
		r.used[i] = true
		r.mu.Unlock()
		return false
	}
	if i >= 0 {
		r.used[i] = true
	}
	seq := 0
	if req.Op == "call" {
		r.seq++
		seq = r.seq
	}
	r.mu.Unlock()
	c := Call{Seq: seq, Op: req.Op, Tool: req.Tool, ArgumentsDigest: digest, Arguments: redact(req.Arguments, nil), AtMillis: at.Sub(r.start).Milliseconds()}
	defer func() {
		if req.Op == "call" {
			c.DurationMillis = float64(time.Since(at).Microseconds()) / 1000
			c.Gates = append(c.Gates, Gate{GateAudit, "pass"})
			if r.cfg.Audit != nil {
				r.cfg.Audit(c)
			}
			r.cfg.Metrics.observe(c)
		}
		r.keep(c)
	}()
	if req.Op == "call" || req.Op == "describe" {
		e, outcome, msg := r.admitRecorded(req.Tool, &c)
		if e == nil {
			c.Outcome, c.Error = outcome, msg
			r.answer(answers, req.ID, c)
			return true
		}
		c.Risk = e.Risk
		if req.Op == "call" {
			c.Arguments = redact(req.Arguments, e.InputSchema)
			if outcome, field, msg := validate(e, req); outcome != "" {
				c.Gates = append(c.Gates, Gate{GateValidation, "refuse"})
				c.Outcome, c.Field, c.Error = outcome, field, msg
				r.answer(answers, req.ID, c)
				return true
			}
			c.Gates = append(c.Gates, Gate{GateValidation, "pass"})
		}
	}
	if i < 0 {
		c.Outcome = OutcomeNotRecorded
		c.Error = fmt.Sprintf("replay: the recorded run made no %s request of %q with these arguments", req.Op, req.Tool)
		r.answer(answers, req.ID, c)
		return true
	}
	rec := r.cfg.Record[i]
	c.Key, c.Outcome, c.Result, c.Error, c.Field, c.RecordedFrom = rec.Key, rec.Outcome, rec.Result, rec.Error, rec.Field, r.cfg.RecordFrom
	switch {
	case c.Outcome != OutcomeOK:
		r.answer(answers, req.ID, c)
	case c.Op == "list":
		var listed []Tool
		_ = json.Unmarshal(c.Result, &listed)
		r.send(answers, answer{ID: req.ID, Tools: listed})
	case c.Op == "describe":
		var t Tool
		_ = json.Unmarshal(c.Result, &t)
		r.send(answers, answer{ID: req.ID, Tool: &t})
	default:
		r.answer(answers, req.ID, c)
	}
	return true
}

// admitRecorded is admit for a replay. The caller's tools are those it
// declares again, or those the replayed run's bundle recorded; they have
// no provider (the record answers them). An operator's tool must be
// registered; when its provider does not answer (a replay offline), the
// tool as the replayed run's bundle recorded it stands in for its listing.
func (r *Channel) admitRecorded(name string, c *Call) (*entry, string, string) {
	recorded := func() (*entry, bool) {
		i := slices.IndexFunc(r.cfg.RecordedSpecs, func(t Tool) bool { return t.Name == name })
		if i < 0 {
			return nil, false
		}
		e, err := find(name, name, r.cfg.RecordedSpecs[i:i+1], nil)
		return e, err == nil
	}
	if isCallers(name) {
		e, err := find(name, strings.TrimPrefix(name, CallerProvider+"."), r.cfg.Caller.Tools, callerTools{r.cfg.Caller})
		if err != nil {
			var ok bool
			if e, ok = recorded(); !ok {
				c.Gates = append(c.Gates, Gate{GateRegistry, "refuse"})
				return nil, OutcomeRefused, err.Error() + " (a replay's caller declares the tools of the run it replays again)"
			}
		}
		c.Gates = append(c.Gates, Gate{GateRegistry, "pass"}, Gate{GatePermission, "pass"})
		r.remember(e)
		return e, "", ""
	}
	e, err := r.cfg.Registry.lookup(r.ctx, name)
	if err != nil {
		var ok bool
		if e, ok = recorded(); !ok || !r.cfg.Registry.has(name) {
			c.Gates = append(c.Gates, Gate{GateRegistry, "refuse"})
			return nil, OutcomeRefused, err.Error()
		}
	}
	c.Gates = append(c.Gates, Gate{GateRegistry, "pass"})
	r.remember(e)
	return r.permit(e, name, c)
}
