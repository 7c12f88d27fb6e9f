package task

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/exec"
	"github.com/sandboxd/sandboxd/task/run"
)

// recordingSource is a container source that writes down what the
// pipeline asks of it, and fails where told; its runs go to a container
// made for them.
type recordingSource struct {
	s                  *Service
	steps              *[]string
	beforeErr, openErr error
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

func (r recordingSource) open(ctx context.Context, j *exec.Job) (exec.Source, error) {
	r.note("open")
	if r.s.admission.full() {
		r.note("admitted")
	}
	if r.openErr != nil {
		return nil, r.openErr
	}
	j.ID = "recorded-run"
	var err error
	if j.Info, j.OCIRuntime, err = r.s.checkRuntime(ctx, "runc"); err != nil {
		return nil, err
	}
	if j.Image, j.ImageName, err = r.s.image(ctx, access.Operator, "sandboxd/shell"); err != nil {
		return nil, err
	}
	return &exec.Fresh{ColdReason: "recorded"}, nil
}

func (r recordingSource) after(rn *exec.Run, _ run.Result, err error) {
	if r.s.admission.full() {
		r.note("slot still held")
	}
	if st, _ := r.s.runs.Get("recorded-run"); st.State == run.Finished {
		r.note("after:finished")
	}
	if err != nil {
		r.note("after an error")
	}
	rn.Cleanup()
}

// unstartable fails every start with err, which is not the task's
// failure but sandboxd's.
type unstartable struct {
	*fake.Runtime
	err error
}

func (u unstartable) Start(context.Context, runtime.Spec) (runtime.Container, error) {
	return nil, u.err
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
		{"execute fails", func(r recordingSource) recordingSource { return r }, "before open admitted after:finished after an error leave", boom},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var steps []string
			var s *Service
			// The program notes that it runs, and whether its run is
			// registered by then.
			var rt runtime.Runtime = fake.New(func(context.Context, runtime.Spec) runtime.Exit {
				steps = append(steps, "execute")
				if _, ok := s.runs.Get("recorded-run"); ok {
					steps = append(steps, "registered")
				}
				return runtime.Exit{}
			})
			if tt.name == "execute fails" {
				rt = unstartable{fake.New(echo), boom}
			}
			s = newService(t, rt, func(c *Config) { c.MaxRunning, c.MaxQueued = 1, 0 })
			src := tt.src(recordingSource{s: s, steps: &steps})
			_, err := s.pipeline(context.Background(), run.Request{Command: &run.Command{Argv: []string{"x"}}}, exec.Plan{Argv: []string{"x"}, Workdir: run.WorkspaceDir, Limits: DefaultConfig().Limits.Default}, "t", newRecorder(), src)
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
