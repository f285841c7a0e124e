package limiter_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
)

// A release that Redis never receives (the link drops it) is recovered by
// the lease's expiry: the slot is taken until lease_ttl has passed since
// the decision, and free from then on.
func TestRedisLostReleaseIsRecoveredByExpiry(t *testing.T) {
	s := redistest.Start(t)
	link := redistest.StartLink(t, s.Addr, false)
	clock := limitertest.NewClock()
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{link.Addr}, Clock: clock,
		Breaker: limiter.BreakerOptions{Disabled: true}})
	p := limitertest.Concurrency(1, 5*time.Second)
	subject := limitertest.Subject()
	acquire := func() (limiter.Request, limiter.Evaluated) {
		t.Helper()
		req := limiter.Request{Policies: limitertest.One(p), Subject: subject, Cost: 1, EvaluationID: limitertest.Subject()}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e, ok := r.Evaluate(ctx, req).(limiter.Evaluated)
		if !ok {
			t.Fatal("no decision")
		}
		return req, e
	}
	_, e := acquire()
	if !e.Allowed {
		t.Fatal("the first request was refused")
	}
	link.Blackhole()
	e.Admitted().Release()
	r.WaitReleases() // the release times out inside the black hole
	link.Heal()
	clock.Advance(5*time.Second - time.Millisecond)
	if _, e := acquire(); e.Allowed {
		t.Fatal("admitted before the lost release's lease expired: the release was not lost, or the lease was void early")
	}
	clock.Advance(time.Millisecond)
	if _, e := acquire(); !e.Allowed {
		t.Fatal("refused once the lease had expired: a lost release leaked the slot")
	}
}

// Releases go through a bounded background queue: while Redis hangs, a
// flood of them never blocks the caller and never piles up goroutines;
// what does not fit is dropped (and counted), to be recovered by expiry.
func TestReleasesWhileRedisHangsAreBoundedAndNeverBlock(t *testing.T) {
	s := redistest.Start(t)
	link := redistest.StartLink(t, s.Addr, false)
	reg := prometheus.NewRegistry()
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{link.Addr}, Registerer: reg,
		Breaker: limiter.BreakerOptions{Disabled: true}})
	p := limitertest.Concurrency(1, 5*time.Second)
	req := limiter.Request{Policies: limitertest.One(p), Subject: limitertest.Subject(), Cost: 1, EvaluationID: limitertest.Subject()}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, ok := r.Evaluate(ctx, req).(limiter.Evaluated)
	if !ok || !e.Allowed {
		t.Fatalf("the first request: %#v", e)
	}
	link.Blackhole()
	const n = 20000
	before := runtime.NumGoroutine()
	start := time.Now()
	for range n {
		e.Admitted().Release()
	}
	took := time.Since(start)
	grew := runtime.NumGoroutine() - before
	if grew > 100 {
		t.Errorf("%d releases into a black hole started %d goroutines", n, grew)
	}
	if took > time.Second {
		t.Errorf("%d releases into a black hole kept their caller %v", n, took)
	}
	if dropped := counterValue(t, reg, "gateway_redis_background_dropped_total", "call", "release"); dropped == 0 {
		t.Error("no release was dropped, or none was counted")
	}
	link.Heal()
	r.WaitReleases() // each queued release is sent or, past its deadline, dropped
}

// counterValue is the value of the counter name whose label is value in
// reg; 0 when there is none.
func counterValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
