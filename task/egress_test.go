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
	"github.com/sandboxd/sandboxd/task/session"
)

// recordingEgress is a gateway that hands out addresses and records what
// the engine binds; the real one is tested in netpolicy/gateway and on
// every backend in the conformance suite.
type recordingEgress struct {
	mu        sync.Mutex
	next      byte
	allocated map[netip.Addr]bool
	bound     []netpolicy.Policy
	logs      []*netpolicy.Log // each binding's, which its tests' programs write as the gateway would
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
	log := &netpolicy.Log{}
	e.logs = append(e.logs, log)
	return egressSession{e, log}, nil
}

// lastLog is the log of the latest binding.
func (e *recordingEgress) lastLog() *netpolicy.Log {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.logs[len(e.logs)-1]
}

type egressSession struct {
	e   *recordingEgress
	log *netpolicy.Log
}

func (s egressSession) Follow(fn netpolicy.Follower) { s.log.Follow(fn) }

// Update records p as bound, as a new binding would be.
func (s egressSession) Update(p netpolicy.Policy) error {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	s.e.bound = append(s.e.bound, p)
	return nil
}

func (s egressSession) End() netpolicy.Summary {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	s.e.ended++
	return s.log.Summary()
}

// connects is a program that makes three connections through eg's latest
// binding, as the gateway would record them, one of them refused.
func connects(eg *recordingEgress) fake.Program {
	return func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		log := eg.lastLog()
		for _, name := range []string{"a.example.org", "b.example.org"} {
			log.Moved(log.Add(netpolicy.Event{Kind: "connect", Name: name, Allowed: true}), 10, 20)
		}
		log.Add(netpolicy.Event{Kind: "connect", Name: "evil.test", Reason: "no rule allows evil.test on port 443"})
		return echo(ctx, spec)
	}
}

func (e *recordingEgress) ProxyURL() string              { return "http://100.72.0.1:3128" }
func (e *recordingEgress) ResolvConf() string            { return "/run/sandboxd/egress/default/resolv.conf" }
func (e *recordingEgress) TrustBundle(netip.Addr) string { return "" }
func (e *recordingEgress) Terminates() bool              { return false }
func (e *recordingEgress) Placeholders([]string) map[string]string {
	return nil
}

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
			eg := newRecordingEgress()
			rt := fake.New(connects(eg))
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
			if res.Status != run.StatusOK || res.Start != wantStart || res.Network == nil || res.Network.Connections != 3 || res.Network.Denied != 1 || res.Network.BytesIn != 40 {
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

// netRecorder records a run's events and follows its network.
type netRecorder struct {
	*recorder
	mu      sync.Mutex
	network []run.NetworkEvent
}

func (r *netRecorder) Network(ev run.NetworkEvent) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.network = append(r.network, ev)
	return nil
}

func (r *netRecorder) heard() []run.NetworkEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.network)
}

// waitHeard waits until r has heard n network events.
func waitHeard(t *testing.T, r *netRecorder, n int) []run.NetworkEvent {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if h := r.heard(); len(h) >= n {
			return h
		}
	}
	t.Fatalf("heard %+v, want %d network events", r.heard(), n)
	return nil
}

// TestNetworkIsFollowedAsItHappens: while an allow-listed run runs, its
// caller hears each decision as it is made and again when its connection
// ends, GetRun reports the log so far and an attacher follows it; once
// it has ended, its result holds the log.
func TestNetworkIsFollowedAsItHappens(t *testing.T) {
	eg := newRecordingEgress()
	decided, proceed := make(chan struct{}), make(chan struct{})
	rt := fake.New(func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		log := eg.lastLog()
		a := log.Add(netpolicy.Event{Kind: "connect", Name: "a.example.org", Port: 443, Allowed: true})
		log.Add(netpolicy.Event{Kind: "dns", Name: "evil.test", Reason: "no rule allows evil.test"})
		close(decided)
		select {
		case <-proceed:
		case <-ctx.Done():
		}
		log.Moved(a, 100, 2000)
		return echo(ctx, spec)
	})
	s := newService(t, rt, withRules, WithEgress(eg), withStore(t))
	caller := &netRecorder{recorder: newRecorder()}
	type outcome struct {
		res run.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := s.Run(operatorCtx(), run.Request{Program: code("x"), Options: run.Options{Network: netpolicy.Request{Mode: netpolicy.AllowList, Policy: "pypi"}}}, caller)
		done <- outcome{res, err}
	}()
	<-decided
	heard := waitHeard(t, caller, 2)
	if heard[0].Index != 0 || heard[0].Name != "a.example.org" || heard[1].Index != 1 || heard[1].Allowed {
		t.Fatalf("the caller heard %+v", heard)
	}
	id := caller.started[0].RunID
	info, err := s.Get(operatorCtx(), id)
	if err != nil || info.State != run.Running || len(info.Network) != 2 || info.Network[1].Name != "evil.test" {
		t.Fatalf("GetRun while it runs: %+v, %v", info, err)
	}
	attacher := &netRecorder{recorder: newRecorder()}
	attached := make(chan error, 1)
	go func() {
		_, err := s.Attach(operatorCtx(), id, 0, 0, attacher)
		attached <- err
	}()
	waitHeard(t, attacher, 2)
	close(proceed)
	out := <-done
	if out.err != nil || out.res.Network == nil || len(out.res.Network.Events) != 2 || out.res.Network.BytesIn != 2000 {
		t.Fatalf("result %+v, %v", out.res, out.err)
	}
	if err := <-attached; err != nil {
		t.Fatal(err)
	}
	// The connection's end came to both as its event again, with bytes.
	for who, r := range map[string]*netRecorder{"caller": caller, "attacher": attacher} {
		h := r.heard()
		last := h[len(h)-1]
		if len(h) != 3 || last.Index != 0 || last.BytesIn != 2000 || last.BytesOut != 100 {
			t.Errorf("the %s heard %+v", who, h)
		}
	}
	info, err = s.Get(operatorCtx(), id)
	if err != nil || info.State != run.Finished || info.Network != nil || info.Result.Network == nil || info.Result.Network.Events[0].BytesIn != 2000 {
		t.Errorf("GetRun once it ended: %+v, %v", info, err)
	}
	// An attacher that comes after the end hears the whole log at once.
	late := &netRecorder{recorder: newRecorder()}
	if _, err := s.Attach(operatorCtx(), id, 0, 0, late); err != nil {
		t.Fatal(err)
	}
	if h := late.heard(); len(h) != 2 || h[0].BytesIn != 2000 || h[1].Name != "evil.test" {
		t.Errorf("a late attacher heard %+v", h)
	}
}

// TestSessionCallsEachHaveTheirShareOfTheNetwork: a session's binding
// outlives its calls; each call hears, reports and records the part of
// its log made while it ran, numbered from 0, and nothing from between
// calls.
func TestSessionCallsEachHaveTheirShareOfTheNetwork(t *testing.T) {
	eg := newRecordingEgress()
	names := make(chan []string, 1)
	rt := fake.New(func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		log := eg.lastLog()
		for _, name := range <-names {
			log.Moved(log.Add(netpolicy.Event{Kind: "connect", Name: name, Allowed: true}), 1, 2)
		}
		return echo(ctx, spec)
	})
	s := newService(t, rt, func(c *Config) { withRules(c); c.MaxSessions = 1 }, WithEgress(eg), withStore(t))
	ctx := operatorCtx()
	info, err := s.CreateSession(ctx, session.Request{Options: run.Options{Network: netpolicy.Request{Mode: netpolicy.AllowList, Policy: "pypi"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.DeleteSession(ctx, info.ID)
	call := func(connects ...string) (run.Result, []run.NetworkEvent) {
		t.Helper()
		names <- connects
		rec := &netRecorder{recorder: newRecorder()}
		res, err := s.Run(ctx, run.Request{Program: code("x"), Options: run.Options{SessionID: info.ID}}, rec)
		if err != nil {
			t.Fatal(err)
		}
		return res, rec.heard()
	}
	first, heard := call("a.test")
	if first.Network == nil || len(first.Network.Events) != 1 || first.Network.BytesIn != 2 || len(heard) != 2 || heard[1].BytesIn != 2 {
		t.Fatalf("the first call: %+v, heard %+v", first.Network, heard)
	}
	// Between calls (a background process, say): no call's.
	eg.lastLog().Add(netpolicy.Event{Kind: "connect", Name: "between.test", Allowed: true})
	second, heard := call("b.test", "c.test")
	if second.Network == nil || len(second.Network.Events) != 2 || second.Network.Events[0].Name != "b.test" || second.Network.Connections != 2 {
		t.Fatalf("the second call: %+v", second.Network)
	}
	if heard[0].Index != 0 || heard[0].Name != "b.test" || heard[len(heard)-1].Index != 1 {
		t.Errorf("the second call heard %+v, numbered from 0", heard)
	}
	if second.BundleDigest == "" {
		t.Fatalf("the second call kept no bundle: %s", second.BundleError)
	}
	b, _ := readBundle(t, s, second.BundleDigest)
	if m := b.Manifest; m.Run.Network == nil || len(m.Run.Network.Events) != 2 || len(m.Run.Network.Rules) != 1 || m.Run.Network.Rules[0].Host != "pypi.internal" {
		t.Errorf("the call's bundle records %+v", b.Manifest.Run.Network)
	}
}
