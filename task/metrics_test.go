package task

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/fake"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/run"
)

// TestMetricsCountTheRunsMadeAndLintClean: the counters and histograms
// match the runs made, by their labels; the metrics pass promlint, as
// `promtool check metrics` would run it.
func TestMetricsCountTheRunsMadeAndLintClean(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	s := pooled(t, fake.New(echo), 1, nil, WithMetrics(reg))
	ctx := access.WithCaller(context.Background(), access.Caller{Name: "team-a"})
	for _, req := range []run.Request{
		{Program: code("print(1)")},
		{Program: code("print(2)")},
		{Command: &run.Command{Argv: []string{"echo", "hi"}}},
	} {
		if res, err := s.Run(ctx, req, newRecorder()); err != nil || res.Status != run.StatusOK {
			t.Fatalf("Run() = %s, %v", res.Status, err)
		}
	}
	if _, err := s.Run(ctx, run.Request{Program: &run.Program{Language: "cobol", Code: "x"}}, newRecorder()); err == nil {
		t.Fatal("a run in an unknown language was accepted")
	}
	for labels, want := range map[[4]string]float64{
		{"OK", "runc", "python", "team-a"}:  2,
		{"OK", "runc", "command", "team-a"}: 1,
	} {
		n := 0.0
		for _, start := range []string{"warm", "cold"} {
			n += testutil.ToFloat64(s.metrics.runs.WithLabelValues(labels[0], labels[1], labels[2], start, labels[3]))
		}
		if n != want {
			t.Errorf("sandboxd_runs_total%v = %v, want %v", labels, n, want)
		}
	}
	limited := access.WithCaller(context.Background(), access.Caller{Name: "team-b", Tenant: &access.Tenant{Name: "team-b", RunsPerMinute: 1}})
	for range 2 {
		s.Run(limited, run.Request{Program: code("print(1)")}, newRecorder())
	}
	if n := testutil.ToFloat64(s.metrics.refusals.WithLabelValues("INVALID_ARGUMENT", "", "team-a")); n != 1 {
		t.Errorf("refusals = %v, want 1", n)
	}
	if n := testutil.ToFloat64(s.metrics.refusals.WithLabelValues("RESOURCE_EXHAUSTED", quotaRunsPerMinute, "team-b")); n != 1 {
		t.Errorf("refusals for runs_per_minute = %v, want 1", n)
	}
	if n := testutil.ToFloat64(s.metrics.active); n != 0 {
		t.Errorf("active runs = %v after every run ended", n)
	}
	if n := testutil.CollectAndCount(s.metrics.duration); n != 1 {
		t.Errorf("%d duration series, want one (runc)", n)
	}
	for _, name := range []string{"sandboxd_run_duration_seconds", "sandboxd_run_queue_wait_seconds", "sandboxd_run_start_seconds", "sandboxd_run_peak_memory_bytes"} {
		if n := samples(t, reg, name); n != 4 {
			t.Errorf("%s has %d samples, want one per run (4: three of team-a, one of team-b)", name, n)
		}
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) > 0 {
		t.Fatalf("promlint: %v %+v", err, problems)
	}
	for _, name := range []string{"sandboxd_pool_size", "sandboxd_pool_ready", "sandboxd_sessions_active", "sandboxd_runs_queued", "sandboxd_admission_slots_used"} {
		if testutil.CollectAndCount(reg, name) == 0 {
			t.Errorf("%s is not reported", name)
		}
	}
}

// samples counts the observations of the histogram name, over its series.
func samples(t *testing.T, g prometheus.Gatherer, name string) uint64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}

// TestQueueDepthGauges: the gauges of admission say how many runs hold a
// slot and how many wait, as they change.
func TestQueueDepthGauges(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	release := make(chan struct{})
	s := newService(t, fake.New(func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return runtime.Exit{}
	}), func(c *Config) { c.MaxRunning, c.MaxQueued = 1, 1 }, WithMetrics(reg))
	value := func(name string) float64 {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == name {
				return f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatalf("%s is not reported", name)
		return 0
	}
	done := make(chan struct{}, 2)
	for range 2 {
		go func() {
			s.Run(context.Background(), run.Request{Program: code("x")}, newRecorder())
			done <- struct{}{}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for value("sandboxd_admission_slots_used") != 1 || value("sandboxd_runs_queued") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("slots used %v, queued %v; want 1 and 1", value("sandboxd_admission_slots_used"), value("sandboxd_runs_queued"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	<-done
	<-done
	if u, q := value("sandboxd_admission_slots_used"), value("sandboxd_runs_queued"); u != 0 || q != 0 {
		t.Fatalf("after the runs: slots used %v, queued %v", u, q)
	}
}

// countingEgress is an egress gateway that also collects metrics, as
// netpolicy/gateway's does.
type countingEgress struct {
	*recordingEgress
	prometheus.Counter
}

// TestEgressGatewayMetricsAreRegistered: the gateway's decisions reach the
// daemon's registry with the engine's own metrics.
func TestEgressGatewayMetricsAreRegistered(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	eg := countingEgress{newRecordingEgress(), prometheus.NewCounter(prometheus.CounterOpts{Name: "sandboxd_egress_decisions_total", Help: "Decisions."})}
	eg.Add(3)
	newService(t, fake.New(echo), withRules, WithEgress(eg), WithMetrics(reg))
	if n, err := testutil.GatherAndCount(reg, "sandboxd_egress_decisions_total"); err != nil || n != 1 {
		t.Fatalf("the gateway's metric was gathered %d times (%v), want once", n, err)
	}
}
