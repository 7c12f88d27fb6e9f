package access

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"
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
	var r Rates
	now := time.Unix(1000, 0)
	for i := range 3 {
		if _, ok := r.Take("a", 3, now); !ok {
			t.Fatalf("run %d of a minute's 3 refused", i+1)
		}
	}
	wait, ok := r.Take("a", 3, now)
	if ok || wait != 20*time.Second {
		t.Fatalf("the 4th run: ok %v, retry in %v; want a refusal, 20s", ok, wait)
	}
	if _, ok := r.Take("b", 3, now); !ok {
		t.Fatal("another tenant's bucket is shared")
	}
	if _, ok := r.Take("a", 3, now.Add(20*time.Second)); !ok {
		t.Fatal("no token 20s later at 3 a minute")
	}
	if _, ok := r.Take("a", 0, now); !ok {
		t.Fatal("no quota refused a run")
	}
}

// TestAdmissionHoldsATenantToItsQuota: a tenant at its max_running waits
// while another's run takes the free slot, and past its max_queued it is
// refused with its own quota named.

// TestSetTokenReplacesTheToken: a rotated token names the caller, the old
// one no longer does, and the tenants stay.
func TestSetTokenReplacesTheToken(t *testing.T) {
	id := NewIdentities("old-token", Caller{Name: "token"}, false)
	id.Set([]Tenant{{Name: "team-a", TokenSHA256: tokenSum("tenant-token")}})
	id.SetToken("new-token")
	if _, ok := id.Identify("old-token", ""); ok {
		t.Error("the old token still names a caller")
	}
	if c, ok := id.Identify("new-token", ""); !ok || c.Name != "token" {
		t.Errorf("the new token: %+v, %v", c, ok)
	}
	if c, ok := id.Identify("tenant-token", ""); !ok || c.Name != "team-a" {
		t.Errorf("a tenant after the rotation: %+v, %v", c, ok)
	}
}
