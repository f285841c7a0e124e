package limiter

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgegate/gateway/internal/series"
)

// admissionMetrics are the series of the admissions made for a route
// (Request.Route), whichever backend decides them: how long each took,
// by outcome, and the fallback's decisions, by route, policy and
// decision. Open registers both, a fallback or not.
type admissionMetrics struct {
	duration  *prometheus.HistogramVec
	fallbacks *prometheus.CounterVec
}

// newAdmissionMetrics registers the series on reg; nil without one.
func newAdmissionMetrics(reg prometheus.Registerer) *admissionMetrics {
	if reg == nil {
		return nil
	}
	m := &admissionMetrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gateway_limiter_duration_seconds",
			Help:    "Time the limiter took to answer, by outcome.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, .75, 1},
		}, []string{"outcome"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_limiter_fallback_total",
			Help: "Decisions taken by this instance's local fallback while the shared limiter could not decide.",
		}, []string{"route", "policy", "decision"}),
	}
	reg.MustRegister(m.duration, m.fallbacks)
	return m
}

// observe is b, timing its admissions when m is not nil.
func (m *admissionMetrics) observe(b Backend) Backend {
	if m == nil {
		return b
	}
	return &observed{Backend: b, duration: m.duration}
}

// observed is a Backend that times each admission made for a route. One
// the caller gave up on before a decision (its context ended) is not
// counted: nobody waited for it.
type observed struct {
	Backend
	duration  *prometheus.HistogramVec
	byOutcome series.Bound[string, prometheus.Observer] // duration's, by outcome
}

func (b *observed) Evaluate(ctx context.Context, req Request) Outcome {
	if !req.observed() {
		return b.Backend.Evaluate(ctx, req)
	}
	start := req.Start
	if start.IsZero() {
		start = time.Now()
	}
	o := b.Backend.Evaluate(ctx, req)
	if _, decided := o.(Evaluated); decided || ctx.Err() == nil {
		b.byOutcome.Get(OutcomeName(o), b.bindOutcome).Observe(time.Since(start).Seconds())
	}
	return o
}

// DeclareSeries exports at 0 the series of route's admissions over
// policies that appear otherwise only with their first event: the
// fallback's decisions, when the backend has a fallback.
func (b *observed) DeclareSeries(route string, policies *PolicySet) {
	if f, ok := b.Backend.(*fallback); ok && f.decisions != nil {
		for _, p := range policies.list {
			for _, allowed := range []bool{true, false} {
				f.decisions.WithLabelValues(route, p.Name, fallbackDecision(allowed))
			}
		}
	}
}

// bindOutcome binds duration's series of outcome.
func (b *observed) bindOutcome(outcome string) prometheus.Observer {
	return b.duration.WithLabelValues(outcome)
}

// observed reports whether req counts in the admission metrics: an
// admission made for a route.
func (req *Request) observed() bool { return req.Route != "" && req.Phase == Admission }
