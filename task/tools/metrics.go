package tools

import "github.com/prometheus/client_golang/prometheus"

// Metrics count the calls of every run by tool and outcome, and time
// those that reached their provider.
type Metrics struct {
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics registers the tool metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandboxd_tool_calls_total",
			Help: "Calls of tools by sandboxed programs, by tool and outcome (ok, refused, invalid_arguments, needs_confirmation, declined, failed, timed_out, cancelled, limit, bad_request).",
		}, []string{"tool", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sandboxd_tool_call_duration_seconds",
			Help:    "Time of the calls that passed the gates, from the request on the channel to the answer, by tool.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 14),
		}, []string{"tool"}),
	}
	for _, c := range []prometheus.Collector{m.calls, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) observe(c Call) {
	if m == nil {
		return
	}
	tool := c.Tool
	if c.Outcome == OutcomeRefused || c.Outcome == OutcomeBadRequest {
		// A name no registry knows must not become a label.
		tool = "unregistered"
		if len(c.Gates) > 0 && c.Gates[0].Decision == "pass" {
			tool = c.Tool
		}
	}
	m.calls.WithLabelValues(tool, c.Outcome).Inc()
	if c.Key != "" {
		m.duration.WithLabelValues(tool).Observe(c.DurationMillis / 1000)
	}
}
