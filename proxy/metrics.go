package proxy

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the request path's Prometheus collectors. Labels carry route
// names and outcomes, never an identity or a pseudonym.
type Metrics struct {
	Requests        *prometheus.CounterVec
	LimiterDuration *prometheus.HistogramVec
	Reloads         *prometheus.CounterVec
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
		Reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_config_reloads_total",
			Help: "Configuration reloads by result (ok, error).",
		}, []string{"result"}),
	}
	reg.MustRegister(m.Requests, m.LimiterDuration, m.Reloads)
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

// Readiness is what /readyz asks.
type Readiness interface {
	Ready(ctx context.Context) error
}

// AdminHandler serves /healthz, /readyz and /metrics. It belongs on the
// admin listener only.
func AdminHandler(ready Readiness, gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if ready == nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("no configuration loaded\n"))
			return
		}
		if err := ready.Ready(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("not ready: " + err.Error() + "\n"))
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	return mux
}
