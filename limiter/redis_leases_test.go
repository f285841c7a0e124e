package limiter_test

import (
	"context"
	"testing"
	"time"

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
