package limiter

import (
	"github.com/prometheus/client_golang/prometheus"
)

type redisMetrics struct {
	restarts prometheus.Counter
	// latencyOK and latencyError are the EVALSHA histogram's two series,
	// looked up once: every call observes one.
	latencyOK, latencyError prometheus.Observer
	breakerOpen             *prometheus.GaugeVec
	batch                   prometheus.Histogram
	cached                  prometheus.Counter
	reloads                 prometheus.Counter
	errors                  *prometheus.CounterVec
	// backgroundDropped counts the calls dropped from the background
	// queue, by name (redis_background.go).
	backgroundDropped map[string]prometheus.Counter
	// Leases of budget: taken, requests admitted from one, units given back.
	budgetTaken, budgetAdmitted, budgetReturned prometheus.Counter
}

func (r *Redis) registerMetrics(reg prometheus.Registerer) {
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gateway_redis_evalsha_duration_seconds",
		Help:    "EVALSHA round trips, by result.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, .75},
	}, []string{"result"})
	r.m = redisMetrics{
		latencyOK: latency.WithLabelValues("ok"), latencyError: latency.WithLabelValues("error"),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_redis_restarts_seen_total",
			Help: "Redis restarts seen as a change of a master's run_id; without persistence each hands every subject a fresh budget.",
		}),
		breakerOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gateway_limiter_breaker_open",
			Help: "1 while the circuit breaker of a Redis node is open or probing, 0 once closed.",
		}, []string{"node"}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gateway_redis_batch_size",
			Help:    "Script calls sent to Redis in one write.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
		}),
		cached: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_limiter_cached_denials_total",
			Help: "Denials answered from this instance's memory of a certain denial, without a Redis call.",
		}),
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_redis_noscript_reloads_total",
			Help: "Times the scripts were loaded again after NOSCRIPT.",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_redis_errors_total",
			Help: "Redis errors by cause.",
		}, []string{"cause"}),
		budgetTaken: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_limiter_budget_leases_total",
			Help: "Leases of budget (a policy's lease) this instance took from Redis.",
		}),
		budgetAdmitted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_limiter_budget_lease_admissions_total",
			Help: "Requests admitted from this instance's leases of budget, without a Redis call.",
		}),
		budgetReturned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_limiter_budget_units_returned_total",
			Help: "Unused units of idle leases of budget given back to Redis.",
		}),
	}
	dropped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_redis_background_dropped_total",
		Help: "Calls sent off the request path (a lease's release, a delayed place given back) dropped unsent: the queue was full, or their deadline passed in it.",
	}, []string{"call"})
	r.m.backgroundDropped = map[string]prometheus.Counter{}
	for _, name := range []string{callRelease, callGiveBack} {
		r.m.backgroundDropped[name] = dropped.WithLabelValues(name)
	}
	for _, cause := range redisErrorCauses() {
		r.m.errors.WithLabelValues(cause)
	}
	if reg != nil {
		reg.MustRegister(r.m.restarts, latency, r.m.breakerOpen, r.m.batch, r.m.cached, r.m.reloads, r.m.errors, dropped,
			r.m.budgetTaken, r.m.budgetAdmitted, r.m.budgetReturned)
		r.penalties.register(reg)
	}
}
