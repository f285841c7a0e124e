package limiter

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The limiter counts the admissions made for a route, whichever backend
// decides them: their time by outcome, and the fallback's decisions by
// route, policy and decision. A settlement, and a request made for no
// route, count in neither.
func TestAdmissionsForARouteAreCountedByTheLimiter(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newAdmissionMetrics(reg)
	b := m.observe(newFallback(down{}, FallbackOptions{Instances: 2}, m.fallbacks))
	defer b.Close()
	p := NewPolicy("per-hour", FixedWindow)
	p.Limit, p.Window, p.Clock = 2, time.Hour, ClockGateway
	ctx := context.Background()
	for range 3 {
		b.Evaluate(ctx, Request{Policies: MustPolicySet(p), Subject: "s", Cost: 1, Route: "orders"})
	}
	b.Evaluate(ctx, Request{Policies: MustPolicySet(p), Subject: "t", Cost: 1})
	b.Evaluate(ctx, Request{Policies: MustPolicySet(p), Subject: "u", Cost: 1, Route: "orders", Phase: Settlement})
	if n := testutil.CollectAndCount(m.duration); n != 2 {
		t.Errorf("%d duration series, want fallback_allowed and fallback_denied", n)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	timed := map[string]uint64{}
	for _, f := range families {
		if f.GetName() != "gateway_limiter_duration_seconds" {
			continue
		}
		for _, s := range f.GetMetric() {
			timed[s.GetLabel()[0].GetValue()] = s.GetHistogram().GetSampleCount()
		}
	}
	if timed["fallback_allowed"] != 1 || timed["fallback_denied"] != 2 {
		t.Errorf("admissions timed by outcome: %v, want fallback_allowed 1 and fallback_denied 2", timed)
	}
	for decision, want := range map[string]float64{"allowed": 1, "denied": 2} {
		if got := testutil.ToFloat64(m.fallbacks.WithLabelValues("orders", "per-hour", decision)); got != want {
			t.Errorf("fallback %s: %v, want %v", decision, got, want)
		}
	}
}

// An admission is timed from the clock reading the caller gives as its
// Start, when it gives one.
func TestAnAdmissionIsTimedFromItsStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newAdmissionMetrics(reg)
	b := m.observe(NewMemory(MemoryOptions{}))
	defer b.Close()
	p := NewPolicy("per-hour", FixedWindow)
	p.Limit, p.Window = 2, time.Hour
	b.Evaluate(context.Background(), Request{Policies: MustPolicySet(p), Subject: "s", Cost: 1, Route: "orders", Start: time.Now().Add(-time.Minute)})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "gateway_limiter_duration_seconds" {
			if s := f.GetMetric()[0].GetHistogram().GetSampleSum(); s < 60 {
				t.Errorf("timed %vs, want at least the minute since its start", s)
			}
			return
		}
	}
	t.Fatal("no duration series")
}
