package task

import (
	"context"
	"sync"
)

// RunState says whether a run is still going.
type RunState int

// The states of a run.
const (
	RunRunning RunState = iota + 1
	RunFinished
)

// Run is what the daemon knows of a run.
type Run struct {
	ID string
	// Tenant is whose run it is.
	Tenant  string
	State   RunState
	Labels  map[string]string
	Started *Started
	Result  *Result
	// Error says why sandboxd failed the run, when it did: then there is
	// no Result.
	Error string
}

// registry tracks running runs and remembers recent finished ones.
type registry struct {
	mu       sync.Mutex
	runs     map[string]*entry
	finished []string // oldest first
	keep     int
}

type entry struct {
	run    Run
	cancel context.CancelCauseFunc
}

func newRegistry(keep int) *registry {
	return &registry{runs: map[string]*entry{}, keep: keep}
}

func (r *registry) add(id, tenant string, labels map[string]string, cancel context.CancelCauseFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs[id] = &entry{run: Run{ID: id, Tenant: tenant, State: RunRunning, Labels: labels}, cancel: cancel}
}

func (r *registry) started(id string, s Started) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.runs[id]; ok {
		e.run.Started = &s
	}
}

// finish records how a run ended: its result, without its list of files
// (up to thousands of entries, which the run's bundle keeps), or why
// sandboxd failed it. It forgets the oldest finished runs beyond the
// number to keep.
func (r *registry) finish(id string, res Result, failed error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.runs[id]
	if !ok {
		return
	}
	e.run.State = RunFinished
	if failed != nil {
		e.run.Error = failed.Error()
	} else {
		res.Files = nil
		e.run.Result = &res
	}
	e.cancel = nil
	r.finished = append(r.finished, id)
	for len(r.finished) > r.keep {
		delete(r.runs, r.finished[0])
		r.finished = r.finished[1:]
	}
}

func (r *registry) get(id string) (Run, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.runs[id]
	if !ok {
		return Run{}, false
	}
	return e.run, true
}

// cancel cancels a running run and returns its state before the call.
func (r *registry) cancel(id string, cause error) (RunState, bool) {
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
