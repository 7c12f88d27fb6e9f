package netpolicy

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func mustRule(t *testing.T, s string) Rule {
	t.Helper()
	r, err := ParseRule(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestParseRule(t *testing.T) {
	for in, want := range map[string]Rule{
		"pypi.internal":         {Host: "pypi.internal"},
		"*.example.org:80,443":  {Host: "*.example.org", Ports: []uint16{80, 443}},
		"10.1.0.0/16:5432":      {CIDR: "10.1.0.0/16", Ports: []uint16{5432}},
		"mirror:8080":           {Host: "mirror", Ports: []uint16{8080}},
		"files.example.org:443": {Host: "files.example.org", Ports: []uint16{443}},
	} {
		got, err := ParseRule(in)
		if err != nil || got.String() != want.String() || got.Host != want.Host || got.CIDR != want.CIDR {
			t.Errorf("ParseRule(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if got.String() != in {
			t.Errorf("%q reads back as %q", in, got.String())
		}
	}
	for _, bad := range []string{"", "Pypi.Internal", "*.com", "a..b", "10.1.0.1/16", "10.1.0.0/33", "::/0", "h:0", "h:65536", "h:x", "-a.b", "*.*.a.b"} {
		if _, err := ParseRule(bad); err == nil {
			t.Errorf("ParseRule(%q) accepted", bad)
		}
	}
}

func TestRuleMatchesAndCovers(t *testing.T) {
	wild := mustRule(t, "*.example.org:443")
	if !wild.MatchesName("a.example.org", 443) || !wild.MatchesName("b.a.example.org", 443) {
		t.Error("*.example.org does not match its names")
	}
	if wild.MatchesName("example.org", 443) || wild.MatchesName("evilexample.org", 443) || wild.MatchesName("a.example.org", 22) {
		t.Error("*.example.org matches its apex, a look-alike, or another port")
	}
	web := mustRule(t, "pypi.internal")
	if !web.MatchesName("pypi.internal", 80) || !web.MatchesName("pypi.internal", 443) || web.MatchesName("pypi.internal", 22) {
		t.Error("a rule without ports is not the web's ports")
	}
	for _, tt := range []struct {
		wider, r string
		want     bool
	}{
		{"*.example.org:443", "a.example.org:443", true},
		{"*.example.org:443", "*.a.example.org:443", true},
		{"*.example.org:443", "example.org:443", false},
		{"*.example.org:443", "a.example.org:80", false},
		{"pypi.internal", "pypi.internal:443", true},
		{"pypi.internal:443", "pypi.internal", false},
		{"10.0.0.0/8:5432", "10.1.0.0/16:5432", true},
		{"10.1.0.0/16:5432", "10.0.0.0/8:5432", false},
		{"10.0.0.0/8:5432", "pypi.internal:5432", false},
	} {
		if got := mustRule(t, tt.wider).Covers(mustRule(t, tt.r)); got != tt.want {
			t.Errorf("%s covers %s = %v, want %v", tt.wider, tt.r, got, tt.want)
		}
	}
}

func operator(t *testing.T) Operator {
	o := DefaultOperator()
	o.Permitted = []Rule{mustRule(t, "*.example.org:443"), mustRule(t, "pypi.internal:80,443"), mustRule(t, "10.9.0.0/16:5432")}
	o.Policies = map[string][]Rule{"pypi": {mustRule(t, "pypi.internal:443")}}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestResolve(t *testing.T) {
	o := operator(t)
	if p, err := o.Resolve(Request{}); err != nil || p.Mode != None {
		t.Fatalf("Resolve() = %+v, %v; want none by default", p, err)
	}
	if _, err := DefaultOperator().Resolve(Request{Mode: AllowList, Rules: []Rule{mustRule(t, "a.example.org:443")}}); !errdefs.IsPermissionDenied(err) || !strings.Contains(err.Error(), "--egress-allow") {
		t.Fatalf("allowlist with no operator rules: %v, want permission denied", err)
	}
	p, err := o.Resolve(Request{Mode: AllowList, Policy: "pypi", Rules: []Rule{mustRule(t, "api.example.org:443")}})
	if err != nil || len(p.Rules) != 2 || p.Name != "pypi" || p.Caps != o.DefaultCaps {
		t.Fatalf("a named policy and a rule: %+v, %v", p, err)
	}
	for _, tt := range []struct {
		req   Request
		check func(error) bool
		field string
	}{
		{Request{Mode: "host"}, errdefs.IsInvalidArgument, "network.mode"},
		{Request{Mode: None, Rules: []Rule{mustRule(t, "a.example.org")}}, errdefs.IsInvalidArgument, "network.mode"},
		{Request{Mode: AllowList}, errdefs.IsInvalidArgument, "network"},
		{Request{Mode: AllowList, Policy: "all"}, errdefs.IsPermissionDenied, "network.policy"},
		{Request{Mode: AllowList, Rules: []Rule{mustRule(t, "a.example.org:22")}}, errdefs.IsPermissionDenied, "network.rules[0]"},
		{Request{Mode: AllowList, Rules: []Rule{mustRule(t, "a.example.org:443"), mustRule(t, "10.0.0.0/8:5432")}}, errdefs.IsPermissionDenied, "network.rules[1]"},
		{Request{Mode: AllowList, Rules: []Rule{{Host: "A.example.org"}}}, errdefs.IsInvalidArgument, "network.rules[0]"},
		{Request{Mode: AllowList, Policy: "pypi", Caps: Caps{BytesIn: 1 << 40}}, errdefs.IsInvalidArgument, "network.caps"},
	} {
		_, err := o.Resolve(tt.req)
		if !tt.check(err) || !strings.HasPrefix(err.Error(), tt.field+":") {
			t.Errorf("Resolve(%+v) = %v, want a refusal naming %s", tt.req, err, tt.field)
		}
	}
}

// TestCheckerDeniesWhatNoRuleOpens is the deny set, on the decision
// function: no test sends a packet to these addresses.
func TestCheckerDeniesWhatNoRuleOpens(t *testing.T) {
	own := []netip.Prefix{netip.MustParsePrefix("192.0.2.10/32"), netip.MustParsePrefix("100.72.0.0/16")}
	c := NewChecker(map[string]netip.Addr{"pypi.internal": netip.MustParseAddr("10.20.0.5")}, own)
	p := Policy{Mode: AllowList, Rules: []Rule{
		mustRule(t, "pypi.internal:443"), mustRule(t, "*.example.org:443"), mustRule(t, "0.0.0.0/0:443"),
		mustRule(t, "10.9.0.0/16:5432"),
	}}
	addr := netip.MustParseAddr
	for _, tt := range []struct {
		name, addr string
		port       uint16
		allowed    bool
	}{
		{"", "169.254.169.254", 443, false}, // cloud metadata
		{"", "127.0.0.1", 443, false},
		{"", "0.0.0.0", 443, false},
		{"", "224.0.0.1", 443, false},
		{"", "192.0.2.10", 443, false},  // this host
		{"", "100.72.0.1", 443, false},  // sandboxd's gateway
		{"", "10.1.2.3", 443, false},    // private: 0.0.0.0/0 does not name it
		{"", "172.16.0.1", 443, false},  // private
		{"", "192.168.1.1", 443, false}, // private
		{"", "10.9.1.1", 5432, true},    // private, named by a rule
		{"", "10.9.1.1", 443, false},    // a port the naming rule lacks
		{"", "203.0.113.7", 443, true},  // public, by 0.0.0.0/0
		{"", "203.0.113.7", 22, false},
		{"a.example.org", "203.0.113.7", 443, true},
		{"a.example.org", "127.0.0.1", 443, false},       // rebinding to loopback
		{"a.example.org", "10.1.2.3", 443, false},        // rebinding to a private range
		{"a.example.org", "169.254.169.254", 443, false}, // rebinding to metadata
		{"a.example.org", "203.0.113.7", 22, false},
		{"example.org", "203.0.113.7", 443, false},
		{"pypi.internal", "10.20.0.5", 443, true}, // the operator vouches for it
		{"pypi.internal", "10.20.0.6", 443, false},
		{"", "::ffff:127.0.0.1", 443, false},
		{"a.example.org", "2001:db8::1", 443, false},
	} {
		d := c.Addr(p, tt.name, addr(tt.addr), tt.port)
		if d.Allowed != tt.allowed || (!d.Allowed && d.Reason == "") || (d.Allowed && d.Rule == "") {
			t.Errorf("%q %s:%d = %+v, want allowed %v with a rule or a reason", tt.name, tt.addr, tt.port, d, tt.allowed)
		}
	}
	if d := c.Name(Policy{Mode: None}, "a.example.org", 443); d.Allowed {
		t.Error("a task without network was allowed a name")
	}
}

func TestLogKeepsCountsPastItsCap(t *testing.T) {
	var l Log
	for i := range MaxEvents + 10 {
		idx := l.Add(Event{Kind: "connect", Allowed: i%2 == 0})
		l.Moved(idx, 1, 2)
	}
	s := l.Summary()
	if len(s.Events) != MaxEvents || s.Dropped != 10 || s.Connections != MaxEvents+10 || s.Denied != (MaxEvents+10)/2 || s.BytesIn != 2*(MaxEvents+10) {
		t.Fatalf("summary: %d events, %d dropped, %d connections, %d denied, %d in", len(s.Events), s.Dropped, s.Connections, s.Denied, s.BytesIn)
	}
}

// TestLogFollower: the follower hears each decision when it is recorded
// and again as its connection ends or is cut, in order, and nothing once
// unset; events past the cap are counted, not told.
func TestLogFollower(t *testing.T) {
	var l Log
	type heard struct {
		i      int
		name   string
		in     int64
		reason string
	}
	var got []heard
	l.Follow(func(i int, e Event) { got = append(got, heard{i: i, name: e.Name, in: e.BytesIn, reason: e.Reason}) })
	a := l.Add(Event{Kind: "connect", Name: "a.test", Allowed: true})
	b := l.Add(Event{Kind: "dns", Name: "b.test", Reason: "no rule allows b.test"})
	l.Moved(a, 10, 20)
	l.Cut(a, "the cap of 10 bytes out is reached")
	l.Follow(nil)
	l.Add(Event{Kind: "connect", Name: "unheard.test"})
	want := []heard{{i: a, name: "a.test"}, {i: b, name: "b.test", reason: "no rule allows b.test"},
		{i: a, name: "a.test", in: 20}, {i: a, name: "a.test", in: 20, reason: "cut: the cap of 10 bytes out is reached"}}
	if !slices.Equal(got, want) {
		t.Errorf("heard %+v\nwant  %+v", got, want)
	}
	var full Log
	told := 0
	full.Follow(func(int, Event) { told++ })
	for range MaxEvents + 5 {
		full.Moved(full.Add(Event{Kind: "connect"}), 1, 1)
	}
	if told != 2*MaxEvents {
		t.Errorf("told %d changes, want %d (past the cap nothing is told)", told, 2*MaxEvents)
	}
}

// TestExcerpt: a follower's share of a log counts as a log of its own,
// from 0, with each event as it last stood.
func TestExcerpt(t *testing.T) {
	var session Log
	session.Add(Event{Kind: "connect", Name: "before.test", Allowed: true})
	var call Excerpt
	session.Follow(func(i int, e Event) { call.Take(i, e) })
	a := session.Add(Event{Kind: "connect", Name: "a.test", Allowed: true})
	session.Add(Event{Kind: "dns", Name: "b.test", Reason: "no rule allows b.test"})
	session.Moved(a, 10, 20)
	session.Moved(a, 1, 2)
	session.Follow(nil)
	session.Moved(session.Add(Event{Kind: "connect", Name: "after.test", Allowed: true}), 5, 5)
	got := call.Summary()
	if len(got.Events) != 2 || got.Events[0].Name != "a.test" || got.Events[1].Name != "b.test" {
		t.Fatalf("events %+v", got.Events)
	}
	if got.Connections != 1 || got.Denied != 1 || got.BytesOut != 11 || got.BytesIn != 22 || got.Events[0].BytesIn != 22 {
		t.Errorf("summary %+v", got)
	}
}

func TestParseSecrets(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	os.WriteFile(keyFile, []byte("sk-from-a-file-0001\n"), 0o600)
	env := map[string]string{"GOOD": "sk-from-env-00001", "SHORT": "abc", "BROKEN": "sk-line\nbreak-000"}
	getenv := func(k string) string { return env[k] }
	good := `{"secrets": [
		{"name": "openai", "env": "GOOD", "hosts": ["api.example.org"], "headers": {"Authorization": "Bearer {secret}"}, "program_env": "OPENAI_API_KEY"},
		{"name": "maps", "file": "` + keyFile + `", "hosts": ["*.maps.example.org"], "paths": ["/v1/"], "methods": ["GET"], "query": "key"}]}`
	list, err := ParseSecrets([]byte(good), getenv)
	if err != nil {
		t.Fatal(err)
	}
	s := NewSecrets(list)
	if names := s.Names(); len(names) != 2 || names[0] != "maps" || names[1] != "openai" {
		t.Errorf("names %q", names)
	}
	maps, _ := s.Get("maps")
	if maps.Value() != "sk-from-a-file-0001" || !maps.MatchesHost("tiles.maps.example.org") || maps.MatchesHost("maps.example.org") ||
		!maps.Matches("GET", "/v1/tiles") || maps.Matches("POST", "/v1/tiles") || maps.Matches("GET", "/v2/") {
		t.Errorf("maps: %+v", maps)
	}
	openai, _ := s.Get("openai")
	if h := openai.HeaderValues(); h["Authorization"] != "Bearer sk-from-env-00001" {
		t.Errorf("headers %v", h)
	}
	if Placeholder("my-key") != "SANDBOXD_SECRET_MY_KEY" {
		t.Error(Placeholder("my-key"))
	}
	for _, tt := range []struct{ json, want string }{
		{`{"secrets": [{"name": "a", "env": "GOOD", "hosts": ["x.org"], "headers": {"Authorization": "Bearer {secret}"}}, {"name": "a", "env": "GOOD", "hosts": ["x.org"], "query": "k"}]}`, "named twice"},
		{`{"secrets": [{"name": "A", "env": "GOOD", "hosts": ["x.org"], "query": "k"}]}`, "a name is"},
		{`{"secrets": [{"name": "a", "env": "GOOD", "file": "/f", "hosts": ["x.org"], "query": "k"}]}`, "one of file and env"},
		{`{"secrets": [{"name": "a", "env": "GOOD", "query": "k"}]}`, "names no hosts"},
		{`{"secrets": [{"name": "a", "env": "GOOD", "hosts": ["x.org"]}]}`, "sets no header"},
		{`{"secrets": [{"name": "a", "env": "GOOD", "hosts": ["X.org"], "query": "k"}]}`, "not a DNS name"},
		{`{"secrets": [{"name": "a", "env": "GOOD", "hosts": ["x.org"], "headers": {"authorization": "{secret}"}}]}`, "canonical form"},
		{`{"secrets": [{"name": "a", "env": "GOOD", "hosts": ["x.org"], "headers": {"Host": "{secret}"}}]}`, "the connection's"},
		{`{"secrets": [{"name": "a", "env": "GOOD", "hosts": ["x.org"], "headers": {"Authorization": "Bearer"}}]}`, "needs {secret}"},
		{`{"secrets": [{"name": "a", "env": "GOOD", "hosts": ["x.org"], "methods": ["get"], "query": "k"}]}`, "upper case"},
		{`{"secrets": [{"name": "a", "env": "GOOD", "hosts": ["x.org"], "paths": ["v1"], "query": "k"}]}`, "does not begin with /"},
		{`{"secrets": [{"name": "a", "env": "GOOD", "hosts": ["x.org"], "query": "k", "program_env": "1X"}]}`, "not a variable name"},
		{`{"secrets": [{"name": "a", "env": "SHORT", "hosts": ["x.org"], "query": "k"}]}`, "at least 8"},
		{`{"secrets": [{"name": "a", "env": "BROKEN", "hosts": ["x.org"], "query": "k"}]}`, "control character"},
		{`{"secrets": [{"name": "a", "file": "/nonexistent/key", "hosts": ["x.org"], "query": "k"}]}`, "no such file"},
		{`{"secrets": [{"name": "a", "env": "GOOD", "hosts": ["x.org"], "query": "k", "value": "x"}]}`, "unknown field"},
	} {
		if _, err := ParseSecrets([]byte(tt.json), getenv); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.json, err, tt.want)
		} else if strings.Contains(err.Error(), "sk-") {
			t.Errorf("the refusal names a value: %v", err)
		}
	}
}

func TestResolveSecrets(t *testing.T) {
	list, err := ParseSecrets([]byte(`{"secrets": [{"name": "openai", "env": "K", "hosts": ["api.example.org"], "headers": {"Authorization": "Bearer {secret}"}},
		{"name": "wild", "env": "K", "hosts": ["*.example.org"], "query": "k"}]}`), func(string) string { return "sk-0123456789" })
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultOperator()
	o.Permitted = []Rule{{Host: "*.example.org"}}
	o.Secrets = NewSecrets(list)
	p, err := o.Resolve(Request{Mode: AllowList, Rules: []Rule{{Host: "api.example.org"}}, Secrets: []string{"openai", "wild"}})
	if err != nil || len(p.Secrets) != 2 {
		t.Fatalf("%+v, %v", p, err)
	}
	for _, tt := range []struct {
		req  Request
		want string
	}{
		{Request{Mode: AllowList, Rules: []Rule{{Host: "api.example.org"}}, Secrets: []string{"nope"}}, `"nope" is not a secret of the operator's`},
		{Request{Mode: AllowList, Rules: []Rule{{Host: "api.example.org"}}, Secrets: []string{"openai", "openai"}}, "named twice"},
		{Request{Mode: AllowList, Rules: []Rule{{Host: "www.example.org"}}, Secrets: []string{"openai"}}, "which no rule of the policy allows"},
		{Request{Mode: None, Secrets: []string{"openai"}}, "takes no policy, rules or secrets"},
	} {
		if _, err := o.Resolve(tt.req); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want %q", tt.req, err, tt.want)
		}
	}
	var none *Secrets
	if _, ok := none.Get("openai"); ok || none.Names() != nil {
		t.Error("no secrets file has secrets")
	}
}
