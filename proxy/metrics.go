package proxy

import (
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the request path's Prometheus collectors. Labels carry route
// names and outcomes, never an identity or a pseudonym.
type Metrics struct {
	Requests        *prometheus.CounterVec
	LimiterDuration *prometheus.HistogramVec
	Fallbacks       *prometheus.CounterVec
	ShadowDenials   *prometheus.CounterVec
	// Per pool and target: requests sent (a retry is a second request),
	// failures by cause, requests sent to another target after this one
	// could not be reached, and gateway_upstream_ejected (1 while the
	// target is out of rotation), read at scrape time.
	UpstreamRequests *prometheus.CounterVec
	UpstreamFailures *prometheus.CounterVec
	UpstreamRetries  *prometheus.CounterVec
	upstreams        *ejectedCollector
}

// NewMetrics registers the collectors on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_requests_total",
			Help: "Requests by route, outcome, status code and the subject's plan (none, a plan the configuration names, or other).",
		}, []string{"route", "outcome", "status", "plan"}),
		LimiterDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gateway_limiter_duration_seconds",
			Help:    "Time the limiter took to answer, by outcome.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, .75, 1},
		}, []string{"outcome"}),
	}
	m.Fallbacks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_limiter_fallback_total",
		Help: "Decisions taken by this instance's local fallback while the shared limiter could not decide.",
	}, []string{"route", "policy", "decision"})
	m.ShadowDenials = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_shadow_denials_total",
		Help: "Requests a shadow policy would have denied; they were forwarded.",
	}, []string{"route", "policy"})
	m.UpstreamRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_upstream_requests_total",
		Help: "Requests sent to each upstream target.",
	}, []string{"pool", "target"})
	m.UpstreamFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_upstream_failures_total",
		Help: "Requests to an upstream target that failed, by cause: refused, connect_timeout, response_timeout, reset, other.",
	}, []string{"pool", "target", "cause"})
	m.UpstreamRetries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_upstream_retries_total",
		Help: "Requests sent to another target after this one could not be reached.",
	}, []string{"pool", "target"})
	m.upstreams = &ejectedCollector{desc: prometheus.NewDesc("gateway_upstream_ejected",
		"1 while an upstream target is out of rotation (failures or a failed health check), else 0.",
		[]string{"pool", "target"}, nil)}
	reg.MustRegister(m.Requests, m.LimiterDuration, m.Fallbacks, m.ShadowDenials, m.UpstreamRequests, m.UpstreamFailures, m.UpstreamRetries, m.upstreams)
	return m
}

var statusLabels = func() (s [600]string) {
	for i := range s {
		s[i] = strconv.Itoa(i)
	}
	return s
}()

func (m *Metrics) observeRequest(route, outcome, plan string, status int) {
	label := "other"
	if status >= 0 && status < len(statusLabels) {
		label = statusLabels[status]
	}
	if route == "" {
		route = "none"
	}
	if plan == "" {
		plan = "none"
	}
	m.Requests.WithLabelValues(route, outcome, label, plan).Inc()
}

func (m *Metrics) fallback(route, policy string, allowed bool) {
	decision := "denied"
	if allowed {
		decision = "allowed"
	}
	m.Fallbacks.WithLabelValues(route, policy, decision).Inc()
}

// forgetTargets deletes the series of the targets that were in old and are
// not in current, so that a target a reload removed stops being reported.
func (m *Metrics) forgetTargets(old, current map[string]*pool) {
	for name, p := range old {
		for _, om := range p.members {
			if np := current[name]; np != nil && slices.ContainsFunc(np.members, func(m *member) bool { return m.name == om.name }) {
				continue
			}
			m.UpstreamRequests.DeleteLabelValues(name, om.name)
			m.UpstreamRetries.DeleteLabelValues(name, om.name)
			m.UpstreamFailures.DeletePartialMatch(prometheus.Labels{"pool": name, "target": om.name})
		}
	}
}

// ejectedCollector reads the rotation state of the current configuration's
// targets when scraped: an ejection ends by the clock, with no event to
// set a gauge on.
type ejectedCollector struct {
	desc    *prometheus.Desc
	handler atomic.Pointer[Handler]
}

func (e *ejectedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- e.desc }

func (e *ejectedCollector) Collect(ch chan<- prometheus.Metric) {
	h := e.handler.Load()
	if h == nil {
		return
	}
	c := h.current.Load()
	if c == nil {
		return
	}
	for _, p := range c.pools {
		for _, m := range p.members {
			v := 0.0
			if !m.inRotation() {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(e.desc, prometheus.GaugeValue, v, p.Name, m.name)
		}
	}
}
