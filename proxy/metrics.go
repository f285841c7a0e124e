package proxy

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the request path's Prometheus collectors. Labels carry route
// names and outcomes, never an identity or a pseudonym.
type Metrics struct {
	Requests        *prometheus.CounterVec
	LimiterDuration *prometheus.HistogramVec
	Fallbacks       *prometheus.CounterVec
	ShadowDenials   *prometheus.CounterVec
}

// NewMetrics registers the collectors on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_requests_total",
			Help: "Requests by route, outcome and status code.",
		}, []string{"route", "outcome", "status"}),
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
	reg.MustRegister(m.Requests, m.LimiterDuration, m.Fallbacks, m.ShadowDenials)
	return m
}

var statusLabels = func() (s [600]string) {
	for i := range s {
		s[i] = strconv.Itoa(i)
	}
	return s
}()

func (m *Metrics) observeRequest(route, outcome string, status int) {
	label := "other"
	if status >= 0 && status < len(statusLabels) {
		label = statusLabels[status]
	}
	if route == "" {
		route = "none"
	}
	m.Requests.WithLabelValues(route, outcome, label).Inc()
}

func (m *Metrics) fallback(route, policy string, allowed bool) {
	decision := "denied"
	if allowed {
		decision = "allowed"
	}
	m.Fallbacks.WithLabelValues(route, policy, decision).Inc()
}
