package task

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task/run"
)

// recordingEgress is a gateway that hands out addresses and records what
// the engine binds; the real one is tested in netpolicy/gateway and on
// every backend in the conformance suite.
type recordingEgress struct {
	mu        sync.Mutex
	next      byte
	allocated map[netip.Addr]bool
	bound     []netpolicy.Policy
	ended     int
}

func newRecordingEgress() *recordingEgress {
	return &recordingEgress{allocated: map[netip.Addr]bool{}}
}

func (e *recordingEgress) Allocate() (netip.Addr, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.next++
	a := netip.AddrFrom4([4]byte{100, 72, 0, e.next})
	e.allocated[a] = true
	return a, nil
}

func (e *recordingEgress) Free(a netip.Addr) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.allocated[a] {
		return fmt.Errorf("%s is not allocated", a)
	}
	delete(e.allocated, a)
	return nil
}

func (e *recordingEgress) Bind(a netip.Addr, p netpolicy.Policy) (netpolicy.Binding, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.allocated[a] {
		return nil, fmt.Errorf("bind %s: not allocated", a)
	}
	e.bound = append(e.bound, p)
	return egressSession{e}, nil
}

type egressSession struct{ e *recordingEgress }

func (s egressSession) End() netpolicy.Summary {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	s.e.ended++
	return netpolicy.Summary{Connections: 3, Denied: 1}
}

func (e *recordingEgress) ProxyURL() string   { return "http://100.72.0.1:3128" }
func (e *recordingEgress) ResolvConf() string { return "/run/sandboxd/egress/default/resolv.conf" }

func (e *recordingEgress) outstanding() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.allocated)
}

func withRules(c *Config) {
	c.Network.Permitted = []netpolicy.Rule{{Host: "*.example.org", Ports: []uint16{443}}}
	c.Network.Policies = map[string][]netpolicy.Rule{"pypi": {{Host: "pypi.internal"}}}
}

func TestAllowListedRunIsLinkedBoundAndFreed(t *testing.T) {
	for _, poolSize := range []int{0, 1} {
		t.Run(fmt.Sprintf("pool %d", poolSize), func(t *testing.T) {
			rt := fake.New(echo)
			eg := newRecordingEgress()
			s := newService(t, rt, func(c *Config) { withRules(c); c.PoolSize = poolSize }, WithEgress(eg))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := s.PoolReady(ctx); err != nil {
				t.Fatal(err)
			}
			req := run.Request{Program: code("x"), Options: run.Options{Network: netpolicy.Request{
				Mode: netpolicy.AllowList, Policy: "pypi", Rules: []netpolicy.Rule{{Host: "api.example.org", Ports: []uint16{443}}}}}}
			res, err := s.Run(operatorCtx(), req, newRecorder())
			if err != nil {
				t.Fatal(err)
			}
			wantStart := run.StartCold
			if poolSize > 0 {
				wantStart = run.StartWarm
			}
			if res.Status != run.StatusOK || res.Start != wantStart || res.Network == nil || res.Network.Connections != 3 {
				t.Fatalf("result = %+v", res)
			}
			specs := rt.Specs()
			spec := specs[len(specs)-1]
			if !spec.Egress.IsValid() || !slices.Contains(spec.Mounts, runtime.Mount{Source: eg.ResolvConf(), Target: "/etc/resolv.conf", ReadOnly: true}) {
				t.Errorf("the container has no link or resolv.conf: %+v", spec)
			}
			if !slices.Contains(spec.Env, "HTTPS_PROXY=http://100.72.0.1:3128") {
				t.Errorf("env %q lacks the proxy", spec.Env)
			}
			eg.mu.Lock()
			bound, ended := eg.bound, eg.ended
			eg.mu.Unlock()
			if len(bound) != 1 || ended != 1 || len(bound[0].Rules) != 2 || bound[0].Rules[0].Host != "pypi.internal" {
				t.Errorf("bound %+v, ended %d", bound, ended)
			}
			// Once the run is cleaned up, only the pool's addresses remain.
			for deadline := time.Now().Add(5 * time.Second); eg.outstanding() != poolSize*2; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d addresses allocated, want the pool's %d", eg.outstanding(), poolSize*2)
				}
			}
		})
	}
}

func TestAllowListRefusals(t *testing.T) {
	s := newService(t, fake.New(echo), withRules, WithEgress(newRecordingEgress()))
	tests := []struct {
		name  string
		net   netpolicy.Request
		check func(error) bool
		field string
	}{
		{"a rule outside the operator's", netpolicy.Request{Mode: netpolicy.AllowList, Rules: []netpolicy.Rule{{Host: "evil.test"}}}, errdefs.IsPermissionDenied, "network.rules[0]"},
		{"a port outside the operator's", netpolicy.Request{Mode: netpolicy.AllowList, Rules: []netpolicy.Rule{{Host: "a.example.org", Ports: []uint16{22}}}}, errdefs.IsPermissionDenied, "network.rules[0]"},
		{"an unknown policy", netpolicy.Request{Mode: netpolicy.AllowList, Policy: "all"}, errdefs.IsPermissionDenied, "network.policy"},
		{"a malformed rule", netpolicy.Request{Mode: netpolicy.AllowList, Rules: []netpolicy.Rule{{Host: "a..b"}}}, errdefs.IsInvalidArgument, "network.rules[0]"},
		{"rules with none", netpolicy.Request{Mode: netpolicy.None, Policy: "pypi"}, errdefs.IsInvalidArgument, "network.mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Run(operatorCtx(), run.Request{Program: code("x"), Options: run.Options{Network: tt.net}}, newRecorder())
			if err == nil || !tt.check(err) || err.Error()[:len(tt.field)] != tt.field {
				t.Fatalf("Run() = %v, want a refusal naming %s", err, tt.field)
			}
		})
	}
}

func TestRulesWithoutGatewayAreRefused(t *testing.T) {
	cfg := DefaultConfig()
	cfg.StateDir = t.TempDir()
	withRules(&cfg)
	if _, err := New(context.Background(), fake.New(echo), cfg, testDisk()); err == nil || !errdefs.IsInvalidArgument(err) {
		t.Fatalf("New() = %v, want a refusal: rules need a gateway", err)
	}
}
