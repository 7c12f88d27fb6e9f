package task

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/task/judge"
	"github.com/sandboxd/sandboxd/task/run"
)

// metrics are the service's Prometheus metrics, registered by New when
// WithMetrics is given.
type metrics struct {
	runs         *prometheus.CounterVec
	refusals     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	queueWait    prometheus.Histogram
	startLatency *prometheus.HistogramVec
	peakMemory   prometheus.Histogram
	output       *prometheus.CounterVec
	active       prometheus.Gauge
	judgements   *prometheus.CounterVec
	judgedCases  *prometheus.CounterVec
	auditErrors  prometheus.Counter
}

// newMetrics makes the service's metrics and registers them, with the
// ones read at each scrape: sessions, the pool, the bundle store.
func newMetrics(s *Service, reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandboxd_runs_total", Help: "Runs that got a container, by how they ended, runtime, language, start (warm or cold) and tenant.",
		}, []string{"status", "runtime", "language", "start", "tenant"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandboxd_run_refusals_total", Help: "Runs refused before they got a container, by the API's code (RESOURCE_EXHAUSTED when busy), the quota met (for RESOURCE_EXHAUSTED) and tenant.",
		}, []string{"code", "quota", "tenant"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sandboxd_run_duration_seconds", Help: "Wall time of runs from the program's start to its end.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 12),
		}, []string{"runtime"}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sandboxd_run_queue_wait_seconds", Help: "Time runs waited for an admission slot (and session calls for the call before).",
			Buckets: prometheus.ExponentialBuckets(0.001, 3, 12),
		}),
		startLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sandboxd_run_start_seconds", Help: "Time from a run's admission to its program's start, by start (warm or cold).",
			Buckets: prometheus.ExponentialBuckets(0.002, 2, 12),
		}, []string{"start"}),
		peakMemory: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sandboxd_run_peak_memory_bytes", Help: "Peak memory of runs' containers (0 where the backend cannot tell).",
			Buckets: prometheus.ExponentialBuckets(1<<20, 4, 8),
		}),
		output: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandboxd_output_bytes_total", Help: "Bytes runs wrote, by stream, counted past the caps too.",
		}, []string{"stream"}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sandboxd_runs_active", Help: "Runs whose program is running.",
		}),
		judgements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandboxd_judgements_total", Help: "Submissions judged, by their verdict (SANDBOX_ERROR: sandboxd failed on a case), isolation and tenant.",
		}, []string{"verdict", "isolation", "tenant"}),
		judgedCases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandboxd_judged_cases_total", Help: "Test cases judged, by verdict; each case that ran is also a run.",
		}, []string{"verdict"}),
		auditErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandboxd_audit_write_errors_total", Help: "Audit records that could not be written (with --audit-required, new runs are refused until one is).",
		}),
	}
	scraped := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandboxd_sessions_active", Help: "Live sessions."},
			func() float64 { return float64(s.sessions.Count()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandboxd_runs_queued", Help: "Runs waiting for an admission slot (--max-queued bounds them)."},
			func() float64 { _, q := s.admission.depth(); return float64(q) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandboxd_admission_slots_used", Help: "Admission slots held by runs and session calls (--max-running bounds them)."},
			func() float64 { r, _ := s.admission.depth(); return float64(r) }),
		&poolCollector{s: s},
	}
	if c, ok := s.egress.(prometheus.Collector); ok {
		scraped = append(scraped, c) // the gateway's decisions
	}
	if st := s.store; st != nil {
		scraped = append(scraped,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandboxd_bundle_store_bytes", Help: "Compressed size of the stored bundles."},
				func() float64 { b, _ := st.Usage(); return float64(b) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sandboxd_bundle_store_evictions_total", Help: "Bundles removed to keep the store within its quota."},
				func() float64 { _, n := st.Usage(); return float64(n) }))
	}
	for _, c := range append([]prometheus.Collector{m.runs, m.refusals, m.duration, m.queueWait, m.startLatency, m.peakMemory, m.output, m.active, m.judgements, m.judgedCases, m.auditErrors}, scraped...) {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ended counts a run that ended with a result.
func (m *metrics) ended(language, tenant, runtime string, start time.Duration, res run.Result) {
	m.runs.WithLabelValues(string(res.Status), runtime, language, string(res.Start), tenant).Inc()
	m.duration.WithLabelValues(runtime).Observe(res.Duration.Seconds())
	m.queueWait.Observe(res.Queued.Seconds())
	m.startLatency.WithLabelValues(string(res.Start)).Observe(max(start, 0).Seconds())
	m.peakMemory.Observe(float64(res.PeakMemoryBytes))
	m.output.WithLabelValues(run.Stdout.String()).Add(float64(res.StdoutTotal))
	m.output.WithLabelValues(run.Stderr.String()).Add(float64(res.StderrTotal))
}

// judged counts a judgement and its cases.
func (m *metrics) judged(j judge.Judgement) {
	m.judgements.WithLabelValues(string(j.Verdict), string(j.Isolation), j.Tenant).Inc()
	for _, c := range j.Cases {
		m.judgedCases.WithLabelValues(string(c.Verdict)).Inc()
	}
}

// poolCollector reports the warm pool at each scrape.
type poolCollector struct{ s *Service }

var (
	poolSizeDesc  = prometheus.NewDesc("sandboxd_pool_size", "Containers the warm pool keeps ready, by image and runtime.", []string{"image", "runtime", "egress", "preimport"}, nil)
	poolReadyDesc = prometheus.NewDesc("sandboxd_pool_ready", "Containers ready in the warm pool, by image and runtime.", []string{"image", "runtime", "egress", "preimport"}, nil)
	poolFailDesc  = prometheus.NewDesc("sandboxd_pool_prepare_failures_total", "Containers the warm pool failed to prepare, by image and runtime.", []string{"image", "runtime", "egress", "preimport"}, nil)
	poolDownDesc  = prometheus.NewDesc("sandboxd_pool_failing", "1 while every prepare of the pool fails (it backs off), by image and runtime.", []string{"image", "runtime", "egress", "preimport"}, nil)
)

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- poolSizeDesc
	ch <- poolReadyDesc
	ch <- poolFailDesc
	ch <- poolDownDesc
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	if c.s.pool == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	statuses, err := c.s.pool.Status(ctx, false)
	if err != nil {
		return
	}
	for _, st := range statuses {
		labels := []string{st.Image, st.Runtime, strconv.FormatBool(st.Egress), strconv.FormatBool(st.Preimport)}
		ch <- prometheus.MustNewConstMetric(poolSizeDesc, prometheus.GaugeValue, float64(st.Size), labels...)
		ch <- prometheus.MustNewConstMetric(poolReadyDesc, prometheus.GaugeValue, float64(st.Ready), labels...)
		ch <- prometheus.MustNewConstMetric(poolFailDesc, prometheus.CounterValue, float64(st.Failures), labels...)
		failing := 0.0
		if !st.FailingSince.IsZero() {
			failing = 1
		}
		ch <- prometheus.MustNewConstMetric(poolDownDesc, prometheus.GaugeValue, failing, labels...)
	}
}
