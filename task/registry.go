package task

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"github.com/sandboxd/sandboxd/task/run"
)

// registry tracks running runs and remembers recent finished ones.
type registry struct {
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
	out *liveOutput
}

func newRegistry(keep int) *registry {
	return &registry{runs: map[string]*entry{}, keep: keep}
}

// add records a run that is about to start, and returns what its output
// streams report to attachers.
func (r *registry) add(id, tenant string, labels map[string]string, cancel context.CancelCauseFunc) *liveOutput {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := newLiveOutput()
	r.added++
	r.runs[id] = &entry{seq: r.added, run: run.Info{ID: id, Tenant: tenant, State: run.Running, Labels: labels}, cancel: cancel, out: out}
	return out
}

// restore records a run that ended before this process started.
func (r *registry) restore(rn run.Info) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := newLiveOutput()
	out.close()
	r.added++
	r.runs[rn.ID] = &entry{seq: r.added, run: rn, out: out}
	r.keepFinished(rn.ID)
}

// keepFinished counts id among the finished runs, and forgets the oldest
// beyond the number to keep. Callers hold r.mu.
func (r *registry) keepFinished(id string) {
	r.finished = append(r.finished, id)
	for len(r.finished) > r.keep {
		delete(r.runs, r.finished[0])
		r.finished = r.finished[1:]
	}
}

// list reports the runs that may pass, newest first.
func (r *registry) list(may func(run.Info) bool) []run.Info {
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

func (r *registry) started(id string, s run.Started) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.runs[id]; ok {
		e.run.Started = &s
		e.out.signal()
	}
}

// finish records how a run ended: its result, without its list of files
// (up to thousands of entries, which the run's bundle keeps), or why
// sandboxd failed it. It forgets the oldest finished runs beyond the
// number to keep.
func (r *registry) finish(id string, res run.Result, failed error) {
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
	e.out.signal()
	r.keepFinished(id)
}

func (r *registry) get(id string) (run.Info, bool) {
	rn, _, ok := r.watch(id)
	return rn, ok
}

// watch reports a run with what signals its next change.
func (r *registry) watch(id string) (run.Info, *liveOutput, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.runs[id]
	if !ok {
		return run.Info{}, nil, false
	}
	return e.run, e.out, true
}

// cancel cancels a running run and returns its state before the call.
func (r *registry) cancel(id string, cause error) (run.State, bool) {
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

// cancelAll cancels every running run.
func (r *registry) cancelAll(cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.runs {
		if e.cancel != nil {
			e.cancel(cause)
		}
	}
}
