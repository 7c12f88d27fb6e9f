package task

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/fake"
)

func tokenSum(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

func TestParseTenantsRefusesByName(t *testing.T) {
	sum := tokenSum("a-token-of-team-a")
	tests := []struct{ name, file, want string }{
		{"unknown field", `{"tenants":[{"name":"a","token_sha256":"` + sum + `","max_runs":1}]}`, "max_runs"},
		{"no identity", `{"tenants":[{"name":"a"}]}`, "needs token_sha256 or cert_name"},
		{"bad name", `{"tenants":[{"name":"a b","cert_name":"a"}]}`, `name "a b"`},
		{"the operator's name", `{"tenants":[{"name":"operator","cert_name":"a"}]}`, "socket's callers'"},
		{"twice", `{"tenants":[{"name":"a","cert_name":"a"},{"name":"a","cert_name":"b"}]}`, "given twice"},
		{"a shared token", `{"tenants":[{"name":"a","token_sha256":"` + sum + `"},{"name":"b","token_sha256":"` + sum + `"}]}`, "another tenant's"},
		{"a token, not its hash", `{"tenants":[{"name":"a","token_sha256":"a-token-of-team-a"}]}`, "64 hex digits"},
		{"negative quota", `{"tenants":[{"name":"a","cert_name":"a","max_running":-1}]}`, "negative"},
		{"bad rule", `{"tenants":[{"name":"a","cert_name":"a","network":{"rules":["x:0"]}}]}`, "not a port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseTenants([]byte(tt.file)); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseTenants() = %v, want an error naming %q", err, tt.want)
			}
		})
	}
	tenants, err := ParseTenants([]byte(`{"tenants":[{"name":"team-a","token_sha256":"` + sum + `","max_running":2,
		"max_limits":{"memory_bytes":67108864,"timeout_ms":5000},"runtimes":["runc"],"network":{"rules":["api.internal.test:443"]}}]}`))
	if err != nil || len(tenants) != 1 || tenants[0].MaxLimits.MemoryBytes != 64<<20 || tenants[0].MaxLimits.Timeout != 5*time.Second {
		t.Fatalf("ParseTenants() = %+v, %v", tenants, err)
	}
}

func TestIdentities(t *testing.T) {
	ids := NewIdentities("the-operators-token", Caller{Name: "token", Mounts: []string{"data"}}, true)
	if c, ok := ids.Identify("the-operators-token", ""); !ok || c.Name != "token" || c.Tenant != nil {
		t.Fatalf("the token file's token: %+v %v", c, ok)
	}
	if c, ok := ids.Identify("", "agent-7"); !ok || c.Name != "agent-7" || len(c.Mounts) != 1 {
		t.Fatalf("a verified certificate without a tenants file: %+v %v", c, ok)
	}
	ids.Set([]Tenant{{Name: "team-a", TokenSHA256: tokenSum("a-token-of-team-a")}, {Name: "team-b", CertName: "b.clients"}})
	if c, ok := ids.Identify("a-token-of-team-a", "b.clients"); !ok || c.Name != "team-a" || c.Tenant == nil {
		t.Fatalf("a tenant's token: %+v %v", c, ok)
	}
	if c, ok := ids.Identify("", "b.clients"); !ok || c.Name != "team-b" {
		t.Fatalf("a tenant's certificate: %+v %v", c, ok)
	}
	for _, tc := range []struct{ token, cert string }{{"wrong-token", ""}, {"", "agent-7"}, {"wrong-token", "b.clients"}, {"", ""}} {
		if c, ok := ids.Identify(tc.token, tc.cert); ok {
			t.Errorf("Identify(%q, %q) = %+v: with a tenants file, only its tenants and the token are callers", tc.token, tc.cert, c)
		}
	}
	if _, ok := ids.Identify("the-operators-token", ""); !ok {
		t.Fatal("the token file's caller is lost when tenants are set")
	}
}

func TestRatesRefillAMinutesWorth(t *testing.T) {
	var r rates
	now := time.Unix(1000, 0)
	for i := range 3 {
		if _, ok := r.take("a", 3, now); !ok {
			t.Fatalf("run %d of a minute's 3 refused", i+1)
		}
	}
	wait, ok := r.take("a", 3, now)
	if ok || wait != 20*time.Second {
		t.Fatalf("the 4th run: ok %v, retry in %v; want a refusal, 20s", ok, wait)
	}
	if _, ok := r.take("b", 3, now); !ok {
		t.Fatal("another tenant's bucket is shared")
	}
	if _, ok := r.take("a", 3, now.Add(20*time.Second)); !ok {
		t.Fatal("no token 20s later at 3 a minute")
	}
	if _, ok := r.take("a", 0, now); !ok {
		t.Fatal("no quota refused a run")
	}
}

// TestAdmissionHoldsATenantToItsQuota: a tenant at its max_running waits
// while another's run takes the free slot, and past its max_queued it is
// refused with its own quota named.
func TestAdmissionHoldsATenantToItsQuota(t *testing.T) {
	a := newAdmission(3, 100)
	ctx := context.Background()
	q := callerQuota{tenant: "a", running: 1, queued: 1}
	hold, err := a.acquire(ctx, "a", q)
	if err != nil {
		t.Fatal(err)
	}
	granted := make(chan func(time.Duration), 1)
	go func() {
		rel, err := a.acquire(ctx, "a", q)
		if err != nil {
			t.Error(err)
		}
		granted <- rel
	}()
	waitQueued(t, a, 1)
	_, err = a.acquire(ctx, "a", q)
	var busy *BusyError
	if !errors.As(err, &busy) || busy.Quota != quotaMaxQueued || busy.Tenant != "a" || busy.Limit != 1 || busy.RetryAfter <= 0 {
		t.Fatalf("a's third run: %v, want its max_queued named", err)
	}
	if !strings.Contains(err.Error(), "tenant a is at its max_queued of 1") {
		t.Fatalf("message %q", err)
	}
	relB, err := a.acquire(ctx, "b", callerQuota{tenant: "b"})
	if err != nil {
		t.Fatalf("b waited behind a tenant at its quota: %v", err)
	}
	relB(0)
	select {
	case <-granted:
		t.Fatal("a's second run started while its first holds its one slot")
	case <-time.After(20 * time.Millisecond):
	}
	hold(0)
	(<-granted)(0)
	if a.running != 0 || a.queued != 0 || len(a.runningBy) != 0 || len(a.quotas) != 0 || len(a.turns) != 0 {
		t.Fatalf("left: %d running, %d queued, by %v, quotas %v", a.running, a.queued, a.runningBy, a.quotas)
	}
}

// TestTenantsAreBoundAndIsolated runs as two tenants on one engine: each
// is held to its grants, and sees, cancels and opens its own runs and
// bundles only, as if the others' did not exist.
func TestTenantsAreBoundAndIsolated(t *testing.T) {
	store := withStore(t)
	s := newService(t, fake.New(func(context.Context, runtime.Spec) runtime.Exit { return runtime.Exit{} }), func(c *Config) {
		c.Network.Permitted = []netpolicy.Rule{{Host: "*.internal.test"}}
		store(c)
	}, WithEgress(newRecordingEgress()))
	a := Caller{Name: "team-a", Tenant: &Tenant{Name: "team-a", Images: []string{"sandboxd/shell"}, Runtimes: []string{"runc"},
		MaxLimits: limits.Limits{MemoryBytes: 64 << 20}, Network: &TenantNetwork{Rules: []string{"api.internal.test:443"}}, MaxSessions: 1}}
	b := Caller{Name: "team-b", Tenant: &Tenant{Name: "team-b"}}
	if err := s.CheckTenants([]Tenant{*a.Tenant, *b.Tenant}); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckTenants([]Tenant{{Name: "c", Network: &TenantNetwork{Rules: []string{"api.elsewhere.test"}}}}); err == nil {
		t.Fatal("a tenant's rule wider than the operator's was accepted")
	}
	actx, bctx := WithCaller(context.Background(), a), WithCaller(context.Background(), b)
	shell := func(o Options) Request { return Request{Command: &Command{Argv: []string{"true"}}, Options: o} }
	for _, tc := range []struct {
		name string
		req  Request
		want string
	}{
		{"an image not granted", Request{Program: code("print(1)")}, `image: "sandboxd/python" is not granted to tenant team-a`},
		{"a runtime not granted", shell(Options{Runtime: "runsc"}), `runtime: "runsc" is not granted to tenant team-a`},
		{"above its memory", shell(Options{Limits: limits.Limits{MemoryBytes: 128 << 20}}), "limits.memory_bytes: 134217728 is above the operator's maximum 67108864"},
		{"a rule outside its own", shell(Options{Network: netpolicy.Request{Mode: netpolicy.AllowList, Rules: []netpolicy.Rule{{Host: "db.internal.test", Ports: []uint16{5432}}}}}), "not within the rules the operator permits"},
	} {
		_, err := s.Run(actx, tc.req, newRecorder())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	res, err := s.Run(actx, shell(Options{}), newRecorder())
	if err != nil || res.Tenant != "team-a" || res.BundleDigest == "" || res.Limits.MemoryBytes != 64<<20 {
		t.Fatalf("team-a's run: %+v %v", res, err)
	}
	if _, err := s.Get(bctx, res.RunID); !errdefs.IsNotFound(err) {
		t.Errorf("team-b got team-a's run: %v", err)
	}
	if _, err := s.Cancel(bctx, res.RunID); !errdefs.IsNotFound(err) {
		t.Errorf("team-b cancelled team-a's run: %v", err)
	}
	if _, err := s.OpenBundle(bctx, res.BundleDigest); !errdefs.IsNotFound(err) {
		t.Errorf("team-b opened team-a's bundle: %v", err)
	}
	if run, err := s.Get(actx, res.RunID); err != nil || run.Tenant != "team-a" {
		t.Errorf("team-a's own run: %+v %v", run, err)
	}
	opCtx := WithCaller(context.Background(), Operator)
	if rc, err := s.OpenBundle(opCtx, res.BundleDigest); err != nil {
		t.Errorf("the operator cannot open a tenant's bundle: %v", err)
	} else {
		rc.Close()
	}
	if rc, err := s.OpenBundle(actx, res.BundleDigest); err != nil {
		t.Errorf("team-a cannot open its bundle: %v", err)
	} else {
		rc.Close()
	}

	// Sessions need a real engine: the e2e test of tenants covers them;
	// here, the table's count of a tenant's sessions.
	if got := s.sessions.reserve("team-a", 10, 1); got != reserved {
		t.Fatalf("team-a's first session: %d", got)
	}
	if got := s.sessions.reserve("team-a", 10, 1); got != reserveTenantFull {
		t.Fatalf("team-a's second session: %d, want its max_sessions met", got)
	}
	if got := s.sessions.reserve("team-b", 10, 1); got != reserved {
		t.Fatalf("team-b's session: %d", got)
	}
	s.sessions.unreserve("team-a")
	s.sessions.unreserve("team-b")
	if len(s.sessions.starting) != 0 {
		t.Fatalf("left starting: %v", s.sessions.starting)
	}
}
