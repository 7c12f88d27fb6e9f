package task

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task/run"
)

// recordingSource is a container source that writes down what the
// pipeline asks of it, and fails where told.
type recordingSource struct {
	s                           *Service
	steps                       *[]string
	beforeErr, openErr, execErr error
}

func (r recordingSource) note(step string) { *r.steps = append(*r.steps, step) }

func (recordingSource) entry() entry { return newWork }

func (r recordingSource) before(context.Context) (func(), error) {
	r.note("before")
	if r.beforeErr != nil {
		return nil, r.beforeErr
	}
	return func() { r.note("leave") }, nil
}

func (r recordingSource) open(_ context.Context, rn *execution) error {
	r.note("open")
	if r.s.admission.full() {
		r.note("admitted")
	}
	if r.openErr != nil {
		return r.openErr
	}
	rn.id = "recorded-run"
	return nil
}

func (r recordingSource) execute(rn *execution) (run.Result, error) {
	r.note("execute")
	if _, ok := r.s.runs.Get(rn.id); ok {
		r.note("registered")
	}
	return run.Result{RunID: rn.id, Status: run.StatusOK}, r.execErr
}

func (r recordingSource) after(rn *execution, _ run.Result, err error) {
	if r.s.admission.full() {
		r.note("slot still held")
	}
	if st, _ := r.s.runs.Get(rn.id); st.State == run.Finished {
		r.note("after:finished")
	}
	if err != nil {
		r.note("after an error")
	}
}

// TestPipelineStepsAndWhatEachFailureUndoes runs the one pipeline over a
// recording source: the steps come in order, the admission slot is free
// before after is called, and each failure undoes exactly what was done.
func TestPipelineStepsAndWhatEachFailureUndoes(t *testing.T) {
	boom := errors.New("boom")
	for _, tt := range []struct {
		name string
		src  func(recordingSource) recordingSource
		want string
		err  error
	}{
		{"a run", func(r recordingSource) recordingSource { return r }, "before open admitted execute registered after:finished leave", nil},
		{"the wait fails", func(r recordingSource) recordingSource { r.beforeErr = boom; return r }, "before", boom},
		{"open fails", func(r recordingSource) recordingSource { r.openErr = boom; return r }, "before open admitted leave", boom},
		{"execute fails", func(r recordingSource) recordingSource { r.execErr = boom; return r }, "before open admitted execute registered after:finished after an error leave", boom},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newService(t, fake.New(echo), func(c *Config) { c.MaxRunning, c.MaxQueued = 1, 0 })
			var steps []string
			src := tt.src(recordingSource{s: s, steps: &steps})
			_, err := s.pipeline(context.Background(), run.Request{Command: &run.Command{Argv: []string{"x"}}}, plan{}, "t", newRecorder(), src)
			if !errors.Is(err, tt.err) {
				t.Fatalf("pipeline() = %v, want %v", err, tt.err)
			}
			if got := strings.Join(steps, " "); got != tt.want {
				t.Fatalf("steps %q\n want %q", got, tt.want)
			}
			if s.admission.full() {
				t.Fatal("the admission slot is still held")
			}
			if slices.Contains(steps, "open") && tt.err == nil {
				if _, ok := s.runs.Get("recorded-run"); !ok {
					t.Fatal("the run is not in the registry")
				}
			}
		})
	}
}
