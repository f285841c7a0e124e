package subject

import "github.com/prometheus/client_golang/prometheus"

// JWKSMetrics count the fetches of a jwks_url key set. A process makes one
// and hands it to each RemoteKeys it builds (a reload that changes the URL
// builds another), since a collector registers once. The URL is no label:
// a gateway has one jwks_url at a time.
type JWKSMetrics struct {
	ok, failed prometheus.Counter
	// lastSuccess is the Unix time of the last fetch that got a usable set
	// (the same set again counts), 0 before any: an alert on its age
	// catches a provider that has been failing long enough to matter.
	lastSuccess prometheus.Gauge
}

// NewJWKSMetrics registers gateway_jwks_fetches_total{result} (ok,
// failed) and gateway_jwks_last_success_timestamp_seconds on reg.
func NewJWKSMetrics(reg prometheus.Registerer) *JWKSMetrics {
	fetches := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_jwks_fetches_total",
		Help: "Fetches of the jwks_url key set by result: ok, or failed (unreachable, not 200, too large, or not a usable key set; the last good set stays).",
	}, []string{"result"})
	lastSuccess := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "gateway_jwks_last_success_timestamp_seconds",
		Help: "Unix time of the last successful fetch of the jwks_url key set; 0 before the first.",
	})
	reg.MustRegister(fetches, lastSuccess)
	return &JWKSMetrics{ok: fetches.WithLabelValues("ok"), failed: fetches.WithLabelValues("failed"), lastSuccess: lastSuccess}
}
