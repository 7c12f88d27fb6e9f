package task

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sandboxd/sandboxd/audit"
	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
)

// auditLines reads the events of the log at path.
func auditLines(t *testing.T, path string) []audit.Event {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []audit.Event
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var e audit.Event
		if err := json.Unmarshal(l, &e); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// TestAuditRecordsDecisionsAndEnds: an accepted run is a decision with
// what it runs and the names of its environment, then its end with the
// bundle; a refused one says why; no environment value is written.
func TestAuditRecordsDecisionsAndEnds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	log, err := audit.Open(path, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	s := newService(t, fake.New(echo), nil, WithAudit(log))
	ctx := access.WithCaller(context.Background(), access.Caller{Name: "team-a", Peer: "10.0.0.7:5000", Method: "/sandboxd.v1.SandboxService/RunCode"})
	req := run.Request{Program: code("print(1)"), Options: run.Options{Env: map[string]string{"API_KEY": "s3cret-value"}}}
	res, err := s.Run(ctx, req, newRecorder())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(ctx, run.Request{Program: &run.Program{Language: "cobol", Code: "x"}}, newRecorder()); err == nil {
		t.Fatal("a run in an unknown language was accepted")
	}
	if _, err := s.Cancel(ctx, "nosuchrun"); err == nil {
		t.Fatal("cancelled a run that does not exist")
	}
	if b, _ := os.ReadFile(path); bytes.Contains(b, []byte("s3cret-value")) {
		t.Fatal("the audit log holds an environment value")
	}
	ev := auditLines(t, path)
	if len(ev) != 4 {
		t.Fatalf("%d lines, want accepted, run_end, refused, a refused cancel: %+v", len(ev), ev)
	}
	acc, end, ref, cancel := ev[0], ev[1], ev[2], ev[3]
	if acc.Kind != audit.KindDecision || acc.Decision != audit.Accepted || acc.Tenant != "team-a" || acc.Peer != "10.0.0.7:5000" ||
		acc.Method == "" || acc.RunID != res.RunID || acc.Image == "" || acc.Runtime == "" || acc.Limits == nil ||
		len(acc.RequestDigest) != 64 || strings.Join(acc.EnvNames, ",") != "API_KEY" {
		t.Errorf("accepted: %+v", acc)
	}
	if end.Kind != audit.KindRunEnd || end.RunID != res.RunID || end.Status != string(run.StatusOK) || end.BundleDigest != res.BundleDigest {
		t.Errorf("run end: %+v (result %s %s)", end, res.Status, res.BundleDigest)
	}
	if ref.Kind != audit.KindDecision || ref.Decision != audit.Refused || ref.Code != "INVALID_ARGUMENT" || !strings.Contains(ref.Reason, "cobol") || ref.RunID != "" {
		t.Errorf("refused: %+v", ref)
	}
	if cancel.Decision != audit.Refused || cancel.Code != "NOT_FOUND" || cancel.RunID != "nosuchrun" || !strings.HasPrefix(cancel.Reason, "cancel: ") {
		t.Errorf("refused cancel: %+v", cancel)
	}
	if rep, err := audit.Verify(path); err != nil || rep.Lines != 4 {
		t.Fatalf("Verify() = %+v, %v", rep, err)
	}
}

// TestAuditWriteErrors: a failed audit write is counted in
// sandboxd_audit_write_errors_total; with AuditRequired the runs and
// sessions after it are refused UNAVAILABLE, saying why, and without it
// they go on.
func TestAuditWriteErrors(t *testing.T) {
	for _, required := range []bool{false, true} {
		t.Run(fmt.Sprintf("required=%v", required), func(t *testing.T) {
			log, err := audit.Open(filepath.Join(t.TempDir(), "audit.log"), audit.Options{})
			if err != nil {
				t.Fatal(err)
			}
			reg := prometheus.NewRegistry()
			s := newService(t, fake.New(echo), func(c *Config) { c.AuditRequired = required; c.MaxSessions = 1 }, WithAudit(log), WithMetrics(reg))
			ctx := context.Background()
			if _, err := s.Run(ctx, run.Request{Program: code("print(1)")}, newRecorder()); err != nil {
				t.Fatal(err)
			}
			log.Close() // every write fails from now on
			// This run's records fail: it ran, as it was admitted before.
			if _, err := s.Run(ctx, run.Request{Program: code("print(1)")}, newRecorder()); err != nil {
				t.Fatal(err)
			}
			if n := promtest.ToFloat64(s.metrics.auditErrors); n != 2 {
				t.Errorf("audit write errors = %v, want 2 (the decision and the end)", n)
			}
			_, runErr := s.Run(ctx, run.Request{Program: code("print(1)")}, newRecorder())
			_, sessErr := s.CreateSession(ctx, session.Request{Language: "python"})
			for what, err := range map[string]error{"run": runErr, "session": sessErr} {
				switch {
				case !required && err != nil:
					t.Errorf("the %s without --audit-required: %v", what, err)
				case required && (!errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "the audit log is closed") || !strings.Contains(err.Error(), "--audit-required")):
					t.Errorf("the %s with --audit-required: %v, want UNAVAILABLE naming the log's error and the flag", what, err)
				}
			}
		})
	}
}
