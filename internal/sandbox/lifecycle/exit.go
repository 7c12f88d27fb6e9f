package lifecycle

import (
	"context"
	"encoding/json"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/sandbox/cgroup"
	"github.com/sandboxd/sandboxd/internal/sandbox/launch"
	"github.com/sandboxd/sandboxd/runtime"
)

// awaitExit waits for a launched program's end and says how it ended,
// whichever tells first: its init's report (see launch.Report), which
// stands for the exit when the program ran in the cgroup at path of h, or
// the backend's word on the container's exit. It returns the reported exit,
// or nil when the backend told; an error when the backend cannot tell. Without
// a cgroup (h nil) only the backend can tell. A report that cannot stand
// for the exit came from an init that holds the container
// (launch.Spec.Hold): release lets it exit, for the backend to tell.
func awaitExit(ctx context.Context, engine <-chan error, report *launch.Report, launched time.Time, h *cgroup.Hierarchy, path string, release func(context.Context)) (*runtime.Exit, error) {
	var reported <-chan struct{}
	if h != nil && path != "" {
		reported = report.Done()
	}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-reported:
			if exit, ok := reportedExit(report, launched, *h, path); ok {
				return &exit, nil
			}
			reported = nil // the backend tells
			release(ctx)
		case err := <-engine:
			return nil, err
		}
	}
}

// reportedExit is the exit that report gave for a program launched at
// launched in the cgroup at path of h. It is false when only the backend
// can tell how the program ended: when something was killed for lack of
// memory, or the program by SIGKILL (which is how an OOM kill looks from
// inside).
func reportedExit(report *launch.Report, launched time.Time, h cgroup.Hierarchy, path string) (runtime.Exit, bool) {
	code, at := report.Exit()
	if code == 128+int(syscall.SIGKILL) {
		return runtime.Exit{}, false
	}
	if n, err := h.OOMKills(path); err != nil || n > 0 {
		return runtime.Exit{}, false
	}
	exit := runtime.Exit{Code: code, StartedAt: launched, FinishedAt: at}
	if peak, err := h.PeakMemory(path); err == nil {
		exit.PeakMemoryBytes = peak
	}
	return exit, true
}

// compileFailed says whether the init reported that the task's compile
// step failed. Only a complete report is read: its token, which the
// program cannot know, keeps the program from saying so itself.
func compileFailed(report *launch.Report) bool {
	select {
	case <-report.Done():
	default:
		return false
	}
	var end launch.RunEnd
	return json.Unmarshal(report.Data(), &end) == nil && end.CompileFailed
}
