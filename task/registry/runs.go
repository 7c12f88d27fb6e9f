// Package registry is what the daemon knows of its runs by id: the runs
// running and recently finished (Runs), what their attachers follow while
// they run (Live), and the idempotency keys that make a retried request
// the same run, kept on disk across restarts (Keys).
package registry

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"github.com/sandboxd/sandboxd/task/run"
)

// Runs tracks running runs and remembers recent finished ones.
type Runs struct {
	mu       sync.Mutex
	runs     map[string]*entry
	finished []string // oldest first
	keep     int
	added    uint64
}

type entry struct {
	seq    uint64 // the order of adds
	run    run.Info
	cancel context.CancelCauseFunc
	// out is what attachers follow, and signals every change of the run.
	out *Live
}

// New remembers the last keep finished runs.
func New(keep int) *Runs {
	return &Runs{runs: map[string]*entry{}, keep: keep}
}

// Add records a run that is about to start, and returns what its output
// streams report to attachers.
func (r *Runs) Add(id, tenant string, labels map[string]string, cancel context.CancelCauseFunc) *Live {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := newLive()
	r.added++
	r.runs[id] = &entry{seq: r.added, run: run.Info{ID: id, Tenant: tenant, State: run.Running, Labels: labels}, cancel: cancel, out: out}
	return out
}

// Restore records a run that ended before this process started.
func (r *Runs) Restore(rn run.Info) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := newLive()
	out.Close()
	r.added++
	r.runs[rn.ID] = &entry{seq: r.added, run: rn, out: out}
	r.keepFinished(rn.ID)
}

// keepFinished counts id among the finished runs, and forgets the oldest
// beyond the number to keep. Callers hold r.mu.
func (r *Runs) keepFinished(id string) {
	r.finished = append(r.finished, id)
	for len(r.finished) > r.keep {
		delete(r.runs, r.finished[0])
		r.finished = r.finished[1:]
	}
}

// List reports the runs that may pass, newest first.
func (r *Runs) List(may func(run.Info) bool) []run.Info {
	type added struct {
		seq uint64
		run run.Info
	}
	var all []added
	r.mu.Lock()
	for _, e := range r.runs {
		if may(e.run) {
			all = append(all, added{e.seq, e.run})
		}
	}
	r.mu.Unlock()
	slices.SortFunc(all, func(a, b added) int { return cmp.Compare(b.seq, a.seq) })
	out := make([]run.Info, len(all))
	for i, a := range all {
		out[i] = a.run
	}
	return out
}

// Started records that a run's container runs.
func (r *Runs) Started(id string, s run.Started) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.runs[id]; ok {
		e.run.Started = &s
		e.out.signal()
	}
}

// Finish records how a run ended: its result, without its list of files
// (up to thousands of entries, which the run's bundle keeps), or why
// sandboxd failed it. It forgets the oldest finished runs beyond the
// number to keep.
func (r *Runs) Finish(id string, res run.Result, failed error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.runs[id]
	if !ok {
		return
	}
	e.run.State = run.Finished
	if failed != nil {
		e.run.Error = failed.Error()
	} else {
		res.Files = nil
		e.run.Result = &res
	}
	e.cancel = nil
	e.out.forgetNetwork() // the result has it
	e.out.signal()
	r.keepFinished(id)
}

// Get reports a run.
func (r *Runs) Get(id string) (run.Info, bool) {
	rn, _, ok := r.Watch(id)
	return rn, ok
}

// Watch reports a run with what signals its next change.
func (r *Runs) Watch(id string) (run.Info, *Live, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.runs[id]
	if !ok {
		return run.Info{}, nil, false
	}
	return e.run, e.out, true
}

// Cancel cancels a running run and returns its state before the call.
func (r *Runs) Cancel(id string, cause error) (run.State, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.runs[id]
	if !ok {
		return 0, false
	}
	if e.cancel != nil {
		e.cancel(cause)
	}
	return e.run.State, true
}

// CancelAll cancels every running run.
func (r *Runs) CancelAll(cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.runs {
		if e.cancel != nil {
			e.cancel(cause)
		}
	}
}
