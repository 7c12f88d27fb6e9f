//go:build integration

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/client"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/audit"
	"github.com/sandboxd/sandboxd/internal/edge/tlsconf"
	"github.com/sandboxd/sandboxd/internal/testutil"
	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/task/session"
)

// tenantConn is a client of one tenant over TLS: by token, or by its
// client certificate.
type tenantConn struct {
	pb.SandboxServiceClient
	client *client.Client
}

func dialTenant(t *testing.T, addr, caFile, token, cert, key string) tenantConn {
	t.Helper()
	cfg, err := tlsconf.Files{CAFile: caFile, CertFile: cert, KeyFile: key}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(client.DialOptions{Addr: addr, Token: token, TLS: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(staticToken(token)))
	}
	conn, err := grpc.NewClient("dns:///"+addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return tenantConn{SandboxServiceClient: pb.NewSandboxServiceClient(conn), client: c}
}

type staticToken string

func (s staticToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(s)}, nil
}
func (staticToken) RequireTransportSecurity() bool { return true }

// runCode runs code as c and returns the result, or the call's error.
func (c tenantConn) runCode(ctx context.Context, code string, opts *pb.RunOptions) (*pb.Result, error) {
	r, _, err := runToEnd(ctx, c.SandboxServiceClient, &pb.RunCodeRequest{Language: "python", Code: code, Options: opts})
	return r, err
}

// quotaOf is the quota a RESOURCE_EXHAUSTED names, with its retry hint.
func quotaOf(t *testing.T, err error) (subject, description string, retry time.Duration) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("%v, want RESOURCE_EXHAUSTED", err)
	}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.QuotaFailure:
			subject, description = d.GetViolations()[0].GetSubject(), d.GetViolations()[0].GetDescription()
		case *errdetails.RetryInfo:
			retry = d.GetRetryDelay().AsDuration()
		}
	}
	if subject == "" || retry <= 0 {
		t.Fatalf("%v: details %v, want a QuotaFailure and a RetryInfo", err, st.Details())
	}
	return subject, description, retry
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestTenants serves two tenants on one TLS listener, team-a by token and
// team-b by client certificate, with different quotas and grants: each is
// held to its own, neither sees the other's runs, bundles or sessions, a
// certificate of the CA that no tenant claims is turned away, and SIGHUP
// reloads the file, keeping the old one when the new one is bad.
func TestTenants(t *testing.T) {
	requireDocker(t)
	ca := testutil.NewTestCA(t, "sandboxd-test-ca")
	srvCert, srvKey := ca.Server("sandboxd")
	bCert, bKey := ca.Client("team-b.clients")
	strayCert, strayKey := ca.Client("agent-7")
	tokenA, tokenC := "team-a-token-0123456789", "team-c-token-0123456789"
	tenantsFile := filepath.Join(t.TempDir(), "tenants.json")
	teams := fmt.Sprintf(`
		{"name": "team-a", "token_sha256": %q, "max_running": 1, "max_queued": 1, "max_sessions": 1,
		 "runtimes": ["runc"], "max_limits": {"timeout_ms": 60000}},
		{"name": "team-b", "cert_name": "team-b.clients", "runs_per_minute": 3}`, sha256Hex(tokenA))
	if err := os.WriteFile(tenantsFile, []byte(`{"tenants": [`+teams+`]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, auditLog := freeAddr(t), filepath.Join(t.TempDir(), "audit.log")
	d := startDaemon(t, t.TempDir(), instanceName(t), "--listen", addr, "--tls-cert", srvCert, "--tls-key", srvKey,
		"--tls-client-ca", ca.File, "--tenants", tenantsFile, "--audit-log", auditLog, "--max-sessions", "4")
	a := dialTenant(t, addr, ca.File, tokenA, "", "")
	b := dialTenant(t, addr, ca.File, "", bCert, bKey)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Grants: team-a's own, and what a result and a run say of whose it is.
	res, err := a.runCode(ctx, "print(1)", nil)
	if err != nil || res.GetStatus() != pb.Status_OK || res.GetTenant() != "team-a" {
		t.Fatalf("team-a's run: %v %v", res, err)
	}
	if _, err := a.runCode(ctx, "print(1)", &pb.RunOptions{Runtime: "runsc"}); status.Code(err) != codes.PermissionDenied ||
		!strings.Contains(err.Error(), "not granted to tenant team-a") {
		t.Errorf("team-a asking for runsc: %v", err)
	}
	if _, err := a.runCode(ctx, "print(1)", &pb.RunOptions{Limits: &pb.Limits{TimeoutMs: 120000}}); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), "limits.timeout_ms") {
		t.Errorf("team-a above its timeout: %v", err)
	}

	// Isolation: team-b cannot read, cancel or fetch what team-a made.
	if _, err := b.GetRun(ctx, &pb.GetRunRequest{RunId: res.GetRunId()}); status.Code(err) != codes.NotFound {
		t.Errorf("team-b read team-a's run: %v", err)
	}
	if _, err := b.CancelRun(ctx, &pb.CancelRunRequest{RunId: res.GetRunId()}); status.Code(err) != codes.NotFound {
		t.Errorf("team-b cancelled team-a's run: %v", err)
	}
	if rc, err := b.client.OpenBundle(ctx, res.GetBundleDigest()); err == nil {
		_, err = io.Copy(io.Discard, rc)
		rc.Close()
		if status.Code(err) != codes.NotFound {
			t.Errorf("team-b fetched team-a's bundle: %v", err)
		}
	}
	if run, err := a.client.Get(ctx, res.GetRunId()); err != nil || run.Tenant != "team-a" {
		t.Errorf("team-a's own run: %+v %v", run, err)
	}
	if rc, err := a.client.OpenBundle(ctx, res.GetBundleDigest()); err != nil {
		t.Errorf("team-a's own bundle: %v", err)
	} else if _, err := io.Copy(io.Discard, rc); err != nil {
		t.Errorf("team-a's own bundle: %v", err)
	}
	sess, err := a.client.CreateSession(ctx, session.Request{Language: "python"})
	if err != nil || sess.Tenant != "team-a" {
		t.Fatalf("team-a's session: %+v %v", sess, err)
	}
	if _, err := b.GetSession(ctx, &pb.GetSessionRequest{SessionId: sess.ID}); status.Code(err) != codes.NotFound {
		t.Errorf("team-b read team-a's session: %v", err)
	}
	if _, err := b.runCode(ctx, "print(2)", &pb.RunOptions{SessionId: sess.ID}); status.Code(err) != codes.NotFound {
		t.Errorf("team-b ran code in team-a's session: %v", err)
	}
	if list, err := b.ListSessions(ctx, &pb.ListSessionsRequest{}); err != nil || len(list.GetSessions()) != 0 {
		t.Errorf("team-b lists %v, %v", list.GetSessions(), err)
	}
	_, err = a.CreateSession(ctx, &pb.CreateSessionRequest{Language: "python"})
	if subject, desc, _ := quotaOf(t, err); subject != "tenant:team-a" || !strings.HasPrefix(desc, "max_sessions") {
		t.Errorf("team-a's second session: %s %s", subject, desc)
	}
	if _, err := a.client.DeleteSession(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}

	// Quotas: team-a at its one running and one queued run is refused a
	// third, naming its quota; team-b's run goes on meanwhile.
	longCtx, stopLong := context.WithCancel(ctx)
	defer stopLong()
	first, err := a.RunCode(longCtx, &pb.RunCodeRequest{Language: "python", Code: "import time\nprint('up', flush=True)\ntime.sleep(60)"})
	if err != nil {
		t.Fatal(err)
	}
	for ev, err := first.Recv(); !strings.Contains(string(ev.GetStdout()), "up"); ev, err = first.Recv() {
		if err != nil {
			t.Fatalf("team-a's long run: %v\n%s", err, d.log)
		}
	}
	queued := make(chan error, 1)
	go func() { _, err := a.runCode(longCtx, "print('second')", nil); queued <- err }()
	time.Sleep(time.Second) // the second run reaches the queue
	_, err = a.runCode(ctx, "print('third')", nil)
	if subject, desc, _ := quotaOf(t, err); subject != "tenant:team-a" || !strings.HasPrefix(desc, "max_queued") {
		t.Errorf("team-a's third run: %s %s", subject, desc)
	}
	if res, err := b.runCode(ctx, "print('b')", nil); err != nil || res.GetStatus() != pb.Status_OK || res.GetTenant() != "team-b" {
		t.Errorf("team-b's run while team-a is at its quota: %v %v", res, err)
	}
	stopLong()
	<-queued

	// Runs a minute: team-b's 3 (one made above), then a refusal.
	for i := range 2 {
		if _, err := b.runCode(ctx, "print(1)", nil); err != nil {
			t.Fatalf("team-b's run %d: %v", i+2, err)
		}
	}
	_, err = b.runCode(ctx, "print(1)", nil)
	if subject, desc, retry := quotaOf(t, err); subject != "tenant:team-b" || !strings.HasPrefix(desc, "runs_per_minute") || retry > time.Minute {
		t.Errorf("team-b's fourth run in a minute: %s %s, retry in %v", subject, desc, retry)
	}

	// A certificate of the same CA that no tenant claims names no caller.
	stray := dialTenant(t, addr, ca.File, "", strayCert, strayKey)
	if _, err := stray.runCode(ctx, "print(1)", nil); status.Code(err) != codes.Unauthenticated {
		t.Errorf("a certificate no tenant claims: %v", err)
	}

	// SIGHUP: team-c joins; a bad file leaves the tenants as they were.
	c := dialTenant(t, addr, ca.File, tokenC, "", "")
	if _, err := c.runCode(ctx, "print(1)", nil); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("team-c before the reload: %v", err)
	}
	withC := `{"tenants": [` + teams + `, {"name": "team-c", "token_sha256": "` + sha256Hex(tokenC) + `"}]}`
	if err := os.WriteFile(tenantsFile, []byte(withC), 0o644); err != nil {
		t.Fatal(err)
	}
	d.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 10*time.Second, func() bool { _, err := c.runCode(ctx, "print(1)", nil); return err == nil })
	if err := os.WriteFile(tenantsFile, []byte(`{"tenants": [{"name": "team-d"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	d.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(d.log.String(), "tenants not reloaded") })
	if res, err := c.runCode(ctx, "print(1)", nil); err != nil || res.GetTenant() != "team-c" {
		t.Errorf("team-c after a bad reload: %v %v", res, err)
	}

	d.stop()
	tenants := map[string]int{}
	for _, e := range auditEvents(t, auditLog) {
		tenants[e.Tenant]++
		if e.Kind == audit.KindDecision && e.Decision == audit.Refused && e.Code == "RESOURCE_EXHAUSTED" && e.Tenant == "" {
			t.Errorf("a quota refusal names no tenant: %+v", e)
		}
	}
	if tenants["team-a"] == 0 || tenants["team-b"] == 0 || tenants["team-c"] == 0 || tenants[""] == 0 {
		t.Errorf("audit lines by tenant: %v", tenants)
	}
	if out, code := cli(t, "audit", "verify", auditLog); code != 0 {
		t.Fatalf("audit verify: %q", out)
	}
}

// waitFor polls cond until it holds, or fails the test after d.
func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v", d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
