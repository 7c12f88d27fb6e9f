package reproducer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
)

// A session's bundles form a chain, each naming the one before; the chain
// replays in a new session: the session made as the first call's bundle
// says, then, call by call, the files uploaded before it and its request,
// each replayed call compared with its recording.

// SessionEngine is an Engine that holds sessions.
type SessionEngine interface {
	Engine
	CreateSession(ctx context.Context, req session.Request) (session.Info, error)
	DeleteSession(ctx context.Context, id string) (session.Info, error)
	UpdateSessionNetwork(ctx context.Context, id string, n netpolicy.Request) (session.Info, error)
	UploadFile(ctx context.Context, sessionID, path string, executable bool, r io.Reader) (task.FileInfo, error)
}

// ChainReport is the replay of a session's chain.
type ChainReport struct {
	Reproduced bool `json:"reproduced"`
	// Session is the session the chain was replayed in.
	Session string `json:"session"`
	// Calls are the replayed calls, oldest first, up to the first that
	// differed; FirstDiffering is its seq, or 0.
	Calls          []*Report `json:"calls"`
	FirstDiffering int64     `json:"first_differing,omitempty"`
	Warnings       []string  `json:"warnings,omitempty"`
}

// maxChain bounds how many bundles a chain is followed through.
const maxChain = 10000

// LoadChain follows last's chain back to the session's first call, and
// returns it oldest first. Every bundle is verified.
func LoadChain(ctx context.Context, last *Recorded, e Engine) ([]*Recorded, error) {
	s := last.Manifest().Run.Session
	if s == nil {
		return nil, errors.New("the bundle is not a session's call")
	}
	chain := []*Recorded{last}
	for cur := last; ; {
		cs := cur.Manifest().Run.Session
		if cs == nil || cs.ID != s.ID {
			return nil, fmt.Errorf("bundle %s is not a call of session %s", cur.Bundle.Digest, s.ID)
		}
		if cs.ParentBundle == "" {
			if cs.Seq != 1 || cs.Create == nil {
				return nil, fmt.Errorf("bundle %s (call %d) has no parent but is not the session's first call", cur.Bundle.Digest, cs.Seq)
			}
			break
		}
		if len(chain) >= maxChain {
			return nil, fmt.Errorf("the chain is longer than %d calls", maxChain)
		}
		rc, err := e.OpenBundle(ctx, cs.ParentBundle)
		if err != nil {
			return nil, fmt.Errorf("call %d's parent %s: %w", cs.Seq, cs.ParentBundle, err)
		}
		parent, err := Load(rc, cs.ParentBundle, artifacts.DefaultReadLimits())
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("call %d's parent %s: %w", cs.Seq, cs.ParentBundle, err)
		}
		if ps := parent.Manifest().Run.Session; ps == nil || ps.Seq != cs.Seq-1 {
			return nil, fmt.Errorf("bundle %s is not call %d of the chain", cs.ParentBundle, cs.Seq-1)
		}
		chain = append(chain, parent)
		cur = parent
	}
	for i, j := 0, len(chain)-1; i < j; i, j = i+1, j-1 {
		chain[i], chain[j] = chain[j], chain[i]
	}
	return chain, nil
}

// SessionRequest is the session the chain's first call ran in.
func SessionRequest(first *Recorded) (session.Request, error) {
	create := first.Manifest().Run.Session.Create
	req, err := first.Request()
	if err != nil {
		return session.Request{}, err
	}
	o := req.Options
	opts := run.Options{
		Image: o.Image, Runtime: o.Runtime, Limits: o.Limits, Network: o.Network, Mounts: o.Mounts,
		Env: create.Env, Workdir: o.Workdir, Seed: o.Seed,
	}
	if n := create.Network; n != nil {
		opts.Network = netpolicy.Request{Mode: netpolicy.Mode(n.Mode), Policy: n.Policy, Rules: n.Rules, Caps: n.Caps, Secrets: n.Secrets}
	}
	for _, f := range create.Files {
		content, ok := first.Entries[artifacts.DirInput+"/"+f.Path]
		if !ok {
			return session.Request{}, fmt.Errorf("the first call's bundle lacks the session's input file %s", f.Path)
		}
		opts.Files = append(opts.Files, run.File{Path: f.Path, Content: content, Executable: f.Executable})
	}
	return session.Request{Language: create.Language, Options: opts}, nil
}

// callRequest is a recorded call as a call of session id; its tool calls
// are answered as they were, or read-only ones live with liveReads.
func callRequest(rec *Recorded, id string, kernel, liveReads bool) (run.Request, error) {
	req, err := rec.Request()
	if err != nil {
		return run.Request{}, err
	}
	o := req.Options
	call := run.Options{SessionID: id, Stdin: o.Stdin, Workdir: o.Workdir, Tools: o.Tools, ToolRecord: o.ToolRecord, ReplayOf: o.ReplayOf}
	call.LiveReadTools = liveReads && len(o.Tools) > 0
	call.Limits.Timeout = o.Limits.Timeout
	if !kernel {
		call.Env = o.Env
	}
	req.Options = call
	return req, nil
}

// ReplayChain replays chain (oldest first) in a new session and compares
// each call; it stops at the first call that differs. With keep, the
// session is left for the caller (a fork); otherwise it is deleted.
func ReplayChain(ctx context.Context, chain []*Recorded, e SessionEngine, opts Options, keep bool) (*ChainReport, error) {
	sreq, err := SessionRequest(chain[0])
	if err != nil {
		return nil, err
	}
	if err := opts.check(run.Request{Options: sreq.Options}); err != nil {
		return nil, err
	}
	info, err := e.CreateSession(ctx, sreq)
	if err != nil {
		return nil, fmt.Errorf("create the session to replay in: %w", err)
	}
	rep := &ChainReport{Session: info.ID, Reproduced: true}
	if !keep {
		defer e.DeleteSession(context.WithoutCancel(ctx), info.ID)
	}
	if m := sreq.Options.Network.Mode; m != "" && m != netpolicy.None {
		rep.Warnings = append(rep.Warnings, "the session had network access: what the hosts it reached answer may differ now")
	}
	for _, rec := range chain {
		cs := rec.Manifest().Run.Session
		for _, c := range cs.NetworkChanges {
			n := netpolicy.Request{Mode: netpolicy.Mode(c.Mode), Policy: c.Policy, Rules: c.Rules, Caps: c.Caps, Secrets: c.Secrets}
			if _, err := e.UpdateSessionNetwork(ctx, info.ID, n); err != nil {
				return rep, fmt.Errorf("change the session's network before call %d: %w", cs.Seq, err)
			}
		}
		for _, u := range cs.Uploads {
			content, ok := rec.Entries[artifacts.DirUpload+"/"+u.Path]
			if !ok {
				return rep, fmt.Errorf("call %d's bundle lacks its upload %s", cs.Seq, u.Path)
			}
			if _, err := e.UploadFile(ctx, info.ID, u.Path, u.Executable, bytes.NewReader(content)); err != nil {
				return rep, fmt.Errorf("upload %s before call %d: %w", u.Path, cs.Seq, err)
			}
		}
		q := rec.Manifest().Reproducible.Request
		kernel := q.Kind == "code" && q.Language == sreq.Language && task.HasKernel(q.Language)
		req, err := callRequest(rec, info.ID, kernel, opts.LiveReadTools)
		if err != nil {
			return rep, fmt.Errorf("call %d: %w", cs.Seq, err)
		}
		got, err := rerun(ctx, e, req)
		if err != nil {
			return rep, fmt.Errorf("replay call %d: %w", cs.Seq, err)
		}
		r := Compare(rec, got)
		gs := got.Manifest().Run.Session
		r.Checks = append(r.Checks, scalar("workspace after the call", cs.WorkspaceAfter, gs.WorkspaceAfter))
		if k1, k2 := rec.Manifest().Reproducible.Outcome.Kernel, got.Manifest().Reproducible.Outcome.Kernel; k1 != nil || k2 != nil {
			r.Checks = append(r.Checks, kernelCheck(k1, k2))
		}
		r.Reproduced = true
		for _, c := range r.Checks {
			r.Reproduced = r.Reproduced && c.Match
		}
		rep.Calls = append(rep.Calls, r)
		if !r.Reproduced {
			rep.Reproduced, rep.FirstDiffering = false, cs.Seq
			break
		}
	}
	return rep, nil
}

// kernelCheck compares two kernel replies: count, value, error, displays.
func kernelCheck(a, b *artifacts.KernelReply) Check {
	show := func(k *artifacts.KernelReply) string {
		if k == nil {
			return "no reply"
		}
		s := "In [" + strconv.FormatInt(k.ExecutionCount, 10) + "]"
		if v, ok := k.Result["text/plain"]; ok {
			s += " value " + v
		}
		if k.Error != nil {
			s += " error " + k.Error.Name + ": " + k.Error.Value
		}
		for _, d := range k.Displays {
			for _, f := range d.Files {
				s += " display " + f.MIME + " " + f.SHA256
			}
		}
		return s
	}
	x, y := show(a), show(b)
	return Check{Name: "kernel reply", Match: x == y, Recorded: x, Replayed: y}
}
