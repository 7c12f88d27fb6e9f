package tools

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
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
// left to the live path.
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
	r.mu.Unlock()
	if i < 0 {
		c := Call{Op: req.Op, Tool: req.Tool, ArgumentsDigest: digest, Arguments: req.Arguments, Outcome: OutcomeNotRecorded,
			Error: fmt.Sprintf("replay: the recorded run made no %s request of %q with these arguments", req.Op, req.Tool), AtMillis: at.Sub(r.start).Milliseconds()}
		r.answer(answers, req.ID, c)
		r.keep(c)
		return true
	}
	c := r.cfg.Record[i]
	c.AtMillis = at.Sub(r.start).Milliseconds()
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
	r.keep(c)
	return true
}
