package proxy

import (
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgegate/gateway/internal/series"
	"github.com/edgegate/gateway/limiter"
)

// Metrics are the request path's Prometheus collectors. Labels carry route
// names and outcomes, never an identity or a pseudonym.
type Metrics struct {
	Requests      *prometheus.CounterVec
	ShadowDenials *prometheus.CounterVec
	// Per route and policy charged by the response: cost headers or
	// trailers missing or malformed (each charged 1), and charges after
	// the response that the limiter did not take.
	CostHeaderInvalid *prometheus.CounterVec
	ChargeFailures    *prometheus.CounterVec
	// Per pool and target: requests sent (a retry is a second request),
	// failures by cause, requests sent again after a try at this target
	// that never reached it, and gateway_upstream_ejected (1 while the
	// target is out of rotation), read at scrape time.
	UpstreamRequests *prometheus.CounterVec
	UpstreamFailures *prometheus.CounterVec
	UpstreamRetries  *prometheus.CounterVec
	// UpstreamEjections counts what max_fails failures in a row did to a
	// target: ejected it, or left it in rotation (max_ejected_percent of
	// the pool was out already, or it was the last target in rotation).
	UpstreamEjections *prometheus.CounterVec
	upstreams         *ejectedCollector
	// UpstreamShed counts the requests a pool's overload block refused
	// (shed, or timed out in its queue), by pool and priority; the
	// limit and the queue's length (gateway_upstream_limit,
	// gateway_upstream_queued) are read at scrape time.
	UpstreamShed *prometheus.CounterVec
	// Latency: the whole request by route and outcome, the upstream
	// exchange by pool, and the requests of each route being served now.
	RequestDuration  *prometheus.HistogramVec
	UpstreamDuration *prometheus.HistogramVec
	InFlight         *prometheus.GaugeVec
	// LeasesHeld are the concurrency leases this instance's requests hold
	// now, by route and policy.
	LeasesHeld *prometheus.GaugeVec
	// Delays are the delays the limiter gave requests it admitted to be
	// held (max_delay), by route and the policy that delayed them.
	Delays *prometheus.HistogramVec
	// RLSRequests are the rate limit service's calls by domain and
	// outcome; RLSDuration their durations by domain.
	RLSRequests *prometheus.CounterVec
	RLSDuration *prometheus.HistogramVec
	// Penalties are the penalties this instance imposed, by route and the
	// policy whose refusal earned each (penalty).
	Penalties *prometheus.CounterVec
}

// rlsBuckets are the rate limit service's call durations, in seconds:
// a decision, not a request forwarded.
var rlsBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1}

// durationBuckets are OpenTelemetry's advised boundaries for HTTP
// durations, in seconds: what dashboards built for other proxies expect.
var durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

// NewMetrics registers the collectors on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_requests_total",
			Help: "Requests by route, outcome, status code and the subject's plan (none, a plan the configuration names, or other).",
		}, []string{"route", "outcome", "status", "plan"}),
	}
	m.ShadowDenials = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_shadow_denials_total",
		Help: "Requests a shadow policy would have denied; they were forwarded.",
	}, []string{"route", "policy"})
	m.CostHeaderInvalid = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_cost_header_invalid_total",
		Help: "Responses whose cost header or trailer was missing or malformed; each was charged 1.",
	}, []string{"route", "policy"})
	m.ChargeFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_limiter_charge_failures_total",
		Help: "Charges after the response that the limiter did not take (the response had gone out as it was).",
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
		Help: "Requests sent again after a try at this target that never reached it: to another target after a failed dial, or on another connection.",
	}, []string{"pool", "target"})
	m.UpstreamEjections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_upstream_ejections_total",
		Help: "What max_fails failures in a row did to an upstream target, by result: ejected, kept_max_ejected_percent (that share of the pool was out already), kept_last_target.",
	}, []string{"pool", "target", "result"})
	m.upstreams = &ejectedCollector{desc: prometheus.NewDesc("gateway_upstream_ejected",
		"1 while an upstream target is out of rotation (failures or a failed health check), else 0.",
		[]string{"pool", "target"}, nil)}
	m.upstreams.limit = prometheus.NewDesc("gateway_upstream_limit",
		"Requests this instance may have in flight to a pool with an overload block now (the adaptive limit, or max_in_flight).",
		[]string{"pool"}, nil)
	m.upstreams.queued = prometheus.NewDesc("gateway_upstream_queued",
		"Requests waiting for a slot of a pool with an overload block now.",
		[]string{"pool"}, nil)
	m.UpstreamShed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_upstream_shed_total",
		Help: "Requests a pool's overload block answered 503 (shed from a full queue, or past queue_timeout), by pool and priority.",
	}, []string{"pool", "priority"})
	m.RequestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gateway_request_duration_seconds",
		Help:    "Time from a request's arrival to the end of its response (an upgraded connection's: to its close), by route (none before one matched) and outcome.",
		Buckets: durationBuckets,
	}, []string{"route", "outcome"})
	m.UpstreamDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gateway_upstream_duration_seconds",
		Help:    "Time a request spent with its pool's targets, retries included, until the end of the response, by pool.",
		Buckets: durationBuckets,
	}, []string{"pool"})
	m.InFlight = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gateway_requests_in_flight",
		Help: "Requests a route matched that are being served now (an upgraded connection counts until it closes).",
	}, []string{"route"})
	m.LeasesHeld = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gateway_limiter_leases_held",
		Help: "Concurrency leases this instance's requests hold now (an upgraded connection's until it closes), by route and policy.",
	}, []string{"route", "policy"})
	m.Delays = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gateway_limiter_delay_seconds",
		Help:    "Delays of the requests a policy's max_delay admitted to be held before they were forwarded, by route and policy.",
		Buckets: durationBuckets,
	}, []string{"route", "policy"})
	m.RLSRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_rls_requests_total",
		Help: "Calls of the rate limit service (ratelimit_grpc), by domain (\"other\" for one no rls_rule names) and outcome.",
	}, []string{"domain", "outcome"})
	m.RLSDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gateway_rls_request_duration_seconds",
		Help:    "Durations of the rate limit service's calls, by domain.",
		Buckets: rlsBuckets,
	}, []string{"domain"})
	m.Penalties = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_limiter_penalties_total",
		Help: "Penalties this instance imposed: subjects a policy with a penalty refused, refused on the route for that long, by route and policy.",
	}, []string{"route", "policy"})
	reg.MustRegister(m.Penalties, m.Requests, m.ShadowDenials, m.CostHeaderInvalid, m.ChargeFailures, m.UpstreamRequests, m.UpstreamFailures, m.UpstreamRetries, m.UpstreamEjections,
		m.upstreams, m.UpstreamShed, m.RequestDuration, m.UpstreamDuration, m.InFlight, m.LeasesHeld, m.Delays,
		m.RLSRequests, m.RLSDuration)
	return m
}

// bindSeries binds the series of l's policies on route, and exports at 0
// those that would otherwise appear only with their first event (a shadow
// policy's denials, the limiter's fallback decisions), so that the
// dashboard reads 0 rather than no data until then.
func (l *limits) bindSeries(m *Metrics, lim Limiter, route string) {
	if m == nil {
		return
	}
	l.bindLeaseGauges(m, route)
	l.bindDelayHistograms(m, route)
	for _, p := range l.policies {
		if p.Shadow {
			m.ShadowDenials.WithLabelValues(route, p.Name)
		}
		if p.Penalty > 0 && !p.Shadow {
			m.Penalties.WithLabelValues(route, p.Name)
		}
	}
	if d, ok := lim.(interface {
		DeclareSeries(route string, policies *limiter.PolicySet)
	}); ok {
		d.DeclareSeries(route, l.set)
	}
}

// routeMetrics are one route's series, bound to their labels when the
// route is compiled, so that the request path observes without a label
// lookup. A duration series and a request counter are bound with the
// first request of their labels: binding every outcome at once would
// export empty series for outcomes a route never has.
type routeMetrics struct {
	route     string
	durations *prometheus.HistogramVec
	requests  *prometheus.CounterVec
	inFlight  prometheus.Gauge // nil for the requests no route matched
	observers series.Bound[string, prometheus.Observer]
	counters  series.Bound[requestLabels, prometheus.Counter]
}

// requestLabels are gateway_requests_total's labels besides the route, as
// the request path has them.
type requestLabels struct {
	outcome, plan string
	status        int
}

// forRoute binds route's series; route "none" is the requests no route
// matched, which have no in-flight gauge.
func (m *Metrics) forRoute(route string) *routeMetrics {
	rm := &routeMetrics{route: route, durations: m.RequestDuration, requests: m.Requests}
	if route != "none" {
		rm.inFlight = m.InFlight.WithLabelValues(route)
	}
	return rm
}

// observe records one request's duration under its outcome, and counts it
// under its outcome, status and plan ("" for none).
func (rm *routeMetrics) observe(outcome, plan string, status int, d time.Duration) {
	rm.counters.Get(requestLabels{outcome, plan, status}, func(l requestLabels) prometheus.Counter {
		label := "other"
		if l.status >= 0 && l.status < len(statusLabels) {
			label = statusLabels[l.status]
		}
		if l.plan == "" {
			l.plan = "none"
		}
		return rm.requests.WithLabelValues(rm.route, l.outcome, label, l.plan)
	}).Inc()
	rm.observers.Get(outcome, func(outcome string) prometheus.Observer {
		return rm.durations.WithLabelValues(rm.route, outcome)
	}).Observe(d.Seconds())
}

var statusLabels = func() (s [600]string) {
	for i := range s {
		s[i] = strconv.Itoa(i)
	}
	return s
}()

// forgetTargets deletes the series of the targets that were in old and are
// not in current, and of the pools, so that a target or a pool a reload
// removed stops being reported.
func (m *Metrics) forgetTargets(old, current map[string]*pool) {
	for name, p := range old {
		if current[name] == nil {
			m.UpstreamDuration.DeleteLabelValues(name)
		}
		if current[name] == nil || current[name].overload == nil {
			m.UpstreamShed.DeletePartialMatch(prometheus.Labels{"pool": name})
		}
		for _, om := range p.members {
			if np := current[name]; np != nil && slices.ContainsFunc(np.members, func(m *member) bool { return m.name == om.name }) {
				continue
			}
			m.UpstreamRequests.DeleteLabelValues(name, om.name)
			m.UpstreamRetries.DeleteLabelValues(name, om.name)
			m.UpstreamFailures.DeletePartialMatch(prometheus.Labels{"pool": name, "target": om.name})
			m.UpstreamEjections.DeletePartialMatch(prometheus.Labels{"pool": name, "target": om.name})
		}
	}
}

// ejectedCollector reads the rotation state of the current configuration's
// targets when scraped: an ejection ends by the clock, with no event to
// set a gauge on.
type ejectedCollector struct {
	desc    *prometheus.Desc
	handler atomic.Pointer[Handler]
	// limit and queued are the overload controllers' gauges, read the
	// same way: a limit moves with every latency sample.
	limit, queued *prometheus.Desc
}

func (e *ejectedCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- e.desc
	ch <- e.limit
	ch <- e.queued
}

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
		if g := p.overload; g != nil {
			ch <- prometheus.MustNewConstMetric(e.limit, prometheus.GaugeValue, float64(g.controller.Limit()), p.Name)
			ch <- prometheus.MustNewConstMetric(e.queued, prometheus.GaugeValue, float64(g.controller.Queued()), p.Name)
		}
		for _, m := range p.members {
			v := 0.0
			if !m.inRotation() {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(e.desc, prometheus.GaugeValue, v, p.Name, m.name)
		}
	}
}
