package task

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
)

// TestCreateSessionFailsCleanly opens sessions whose container cannot be
// had (issue 29: ten such requests gave ten panics in the cleanup, left
// four tmpfs mounts each, and never gave the uid back). Each gets the
// backend's error with its class, and the daemon keeps nothing of it: no
// task folder, no uid, no session, no reservation against the quota.
func TestCreateSessionFailsCleanly(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		is   func(error) bool
	}{
		{"the runtime refuses the container", errdefs.ErrFailedPrecondition.WithMessage("container did not start: runc create failed: exit status 1"), errdefs.IsFailedPrecondition},
		{"the backend is down", errdefs.ErrUnavailable.WithMessage("connection refused"), errdefs.IsUnavailable},
		{"the backend fails", errors.New("can't get final child's PID from pipe: EOF"), func(err error) bool { return err != nil }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rt := fake.New(echo)
			s := newService(t, rt, func(c *Config) { c.MaxSessions = 2 })
			rt.SetPrepareErr(tt.err)
			for range 3 { // more than --max-sessions: nothing stays reserved
				_, err := s.CreateSession(context.Background(), session.Request{Language: "python"})
				if !tt.is(err) || err.Error() != tt.err.Error() && !errors.Is(err, tt.err) {
					t.Fatalf("CreateSession() = %v, want the backend's error %v", err, tt.err)
				}
			}
			assertNoTaskFolders(t, s)
			inUse := s.uids.InUse()
			if inUse != 0 {
				t.Errorf("%d uids still in use after failed sessions", inUse)
			}
			if n := len(s.ListSessions(context.Background())); n != 0 {
				t.Errorf("%d sessions listed, want none", n)
			}
			if live := rt.Live(); len(live) > 0 {
				t.Errorf("containers left: %v", live)
			}
			// Three failures did not use up --max-sessions 2.
			if _, err := s.CreateSession(context.Background(), session.Request{}); errdefs.IsResourceExhausted(err) {
				t.Fatalf("CreateSession() = %v: failed sessions still count against --max-sessions", err)
			}
		})
	}
}
func TestCallOptionsThatAreTheSessions(t *testing.T) {
	if err := checkCallOptions(run.Options{Env: map[string]string{"A": "1"}, Workdir: "sub"}); err != nil {
		t.Fatalf("env and workdir refused: %v", err)
	}
	for field, o := range map[string]run.Options{
		"options.runtime": {Runtime: "runc"},
		"options.mounts":  {Mounts: []string{"data"}},
	} {
		if err := checkCallOptions(o); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v", field, err)
		}
	}
}

// TestPauseNeedsABackendThatCan: on a backend whose sessions cannot be
// checkpointed a pause is a failed precondition, leaving no checkpoint
// folder and the session as it was; a resume of a session that is not
// paused, and of one that does not exist, are refused.
func TestPauseNeedsABackendThatCan(t *testing.T) {
	rt := fake.New(echo)
	s := newService(t, rt, func(c *Config) { c.MaxSessions = 2 })
	ctx := context.Background()
	info, err := s.CreateSession(ctx, session.Request{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PauseSession(ctx, info.ID); !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("PauseSession() = %v, want a failed precondition", err)
	}
	if _, err := os.Stat(s.checkpointDir(info.ID)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused pause left its checkpoint folder: %v", err)
	}
	if got, err := s.GetSession(ctx, info.ID); err != nil || got.State != session.Active {
		t.Errorf("after a refused pause the session is %+v, %v", got, err)
	}
	if _, err := s.ResumeSession(ctx, info.ID); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("ResumeSession() of an active session = %v, want a failed precondition", err)
	}
	if _, err := s.ResumeSession(ctx, "no-such-session"); !errdefs.IsNotFound(err) {
		t.Errorf("ResumeSession() of no session = %v, want not found", err)
	}
	if _, err := s.PauseSession(ctx, "no-such-session"); !errdefs.IsNotFound(err) {
		t.Errorf("PauseSession() of no session = %v, want not found", err)
	}
}
