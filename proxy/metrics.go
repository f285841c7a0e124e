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
	reg.MustRegister(m.Requests, m.LimiterDuration)
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
