package task

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/run"
)

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
	s := newService(t, fake.New(func(context.Context, runtime.Spec) runtime.Exit { return runtime.Exit{} }), func(c *Config) {
		c.Network.Permitted = []netpolicy.Rule{{Host: "*.internal.test"}}
		secrets, err := netpolicy.ParseSecrets([]byte(`{"secrets": [{"name": "openai", "env": "K", "hosts": ["api.internal.test"], "query": "key"}]}`),
			func(string) string { return "sk-0123456789" })
		if err != nil {
			t.Fatal(err)
		}
		c.Network.Secrets = netpolicy.NewSecrets(secrets)
	}, WithEgress(newRecordingEgress()), withStore(t))
	a := access.Caller{Name: "team-a", Tenant: &access.Tenant{Name: "team-a", Images: []string{"sandboxd/shell"}, Runtimes: []string{"runc"},
		MaxLimits: limits.Limits{MemoryBytes: 64 << 20}, Network: &access.TenantNetwork{Rules: []string{"api.internal.test:443"}}, MaxSessions: 1}}
	b := access.Caller{Name: "team-b", Tenant: &access.Tenant{Name: "team-b"}}
	if err := s.CheckTenants([]access.Tenant{*a.Tenant, *b.Tenant}); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckTenants([]access.Tenant{{Name: "c", Network: &access.TenantNetwork{Rules: []string{"api.elsewhere.test"}}}}); err == nil {
		t.Fatal("a tenant's rule wider than the operator's was accepted")
	}
	if err := s.CheckTenants([]access.Tenant{{Name: "e", Secrets: []string{"stripe"}}}); err == nil || !strings.Contains(err.Error(), `secrets: "stripe" is not one of the operator's`) {
		t.Errorf("a grant of a secret the operator lacks: %v", err)
	}
	for _, bad := range []string{"orders.[", "", "caller.add"} {
		if err := s.CheckTenants([]access.Tenant{{Name: "d", Tools: []string{"orders.*", bad}}}); err == nil || !strings.Contains(err.Error(), "tools: ") {
			t.Errorf("tools %q: %v, want a refusal naming tools", bad, err)
		}
	}
	actx, bctx := access.WithCaller(context.Background(), a), access.WithCaller(context.Background(), b)
	shell := func(o run.Options) run.Request {
		return run.Request{Command: &run.Command{Argv: []string{"true"}}, Options: o}
	}
	for _, tc := range []struct {
		name string
		req  run.Request
		want string
	}{
		{"an image not granted", run.Request{Program: code("print(1)")}, `image: "sandboxd/python" is not granted to tenant team-a`},
		{"a runtime not granted", shell(run.Options{Runtime: "runsc"}), `runtime: "runsc" is not granted to tenant team-a`},
		{"above its memory", shell(run.Options{Limits: limits.Limits{MemoryBytes: 128 << 20}}), "limits.memory_bytes: 134217728 (128MiB) is above the operator's maximum 67108864 (64MiB)"},
		{"a secret not granted", shell(run.Options{Network: netpolicy.Request{Mode: netpolicy.AllowList, Rules: []netpolicy.Rule{{Host: "api.internal.test", Ports: []uint16{443}}}, Secrets: []string{"openai"}}}),
			`network.secrets: "openai" is not granted to tenant team-a`},
		{"a rule outside its own", shell(run.Options{Network: netpolicy.Request{Mode: netpolicy.AllowList, Rules: []netpolicy.Rule{{Host: "db.internal.test", Ports: []uint16{5432}}}}}), "not within the rules the operator permits"},
	} {
		_, err := s.Run(actx, tc.req, newRecorder())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	res, err := s.Run(actx, shell(run.Options{}), newRecorder())
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
	if rn, err := s.Get(actx, res.RunID); err != nil || rn.Tenant != "team-a" {
		t.Errorf("team-a's own run: %+v %v", rn, err)
	}
	opCtx := access.WithCaller(context.Background(), access.Operator)
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
}
