package task

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
)

// TestALogLinePerRunAndSessionEvent: an operator's log has one line at a
// run's end and one per session event, with what they look for and never
// the code or an environment value.
func TestALogLinePerRunAndSessionEvent(t *testing.T) {
	var out testutil.Buffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	s := newService(t, fake.New(echo), func(c *Config) { c.MaxSessions = 1 }, WithLogger(log), withStore(t))
	ctx := context.Background()
	res, err := s.Run(ctx, run.Request{Program: &run.Program{Language: "python", Code: "print('the-code')"},
		Options: run.Options{Env: map[string]string{"TOKEN": "the-secret"}}}, newRecorder())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.CreateSession(ctx, session.Request{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteSession(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	// The context names no caller: the tenant is "unknown".
	lines := out.String()
	for _, want := range []string{
		`msg="run ended" run=` + res.RunID + ` tenant=unknown language=python status=OK exit_code=0 duration=`,
		`image=sandboxd/python runtime=runc`,
		` bundle=` + res.BundleDigest,
		`msg="session created" session=` + info.ID,
		`msg="session ended" session=` + info.ID + ` tenant=unknown state=DELETED`,
	} {
		if !strings.Contains(lines, want) {
			t.Errorf("the log has no %q:\n%s", want, lines)
		}
	}
	for _, secret := range []string{"the-code", "the-secret"} {
		if strings.Contains(lines, secret) {
			t.Errorf("the log shows %q:\n%s", secret, lines)
		}
	}
	if n := strings.Count(lines, `msg="run ended"`); n != 1 || res.BundleDigest == "" {
		t.Errorf("%d run lines, bundle %q: want one line and a bundle", n, res.BundleDigest)
	}
	// A caller's address is on its run's line.
	before := len(out.String())
	peer := access.WithCaller(ctx, access.Caller{Name: "team-a", Peer: "10.0.0.7:5000"})
	if _, err := s.Run(peer, run.Request{Program: &run.Program{Language: "python", Code: "1"}}, newRecorder()); err != nil {
		t.Fatal(err)
	}
	if lines := out.String()[before:]; !strings.Contains(lines, "tenant=team-a") || !strings.Contains(lines, " peer=10.0.0.7:5000") {
		t.Errorf("the run line names no tenant and peer:\n%s", lines)
	}
}
