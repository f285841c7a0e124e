package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
)

func evalshaCalls(t *testing.T, s *redistest.Server) int64 {
	t.Helper()
	calls, _ := evalshaStats(t, s)
	return int64(calls)
}

// A subject over its limit that keeps asking costs Redis one call per
// denial period, not one per request: at most 0.01 a request.
func TestAFloodingDeniedSubjectIsAnsweredWithoutRedis(t *testing.T) {
	s := redistest.Start(t)
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
	p := limitertest.FixedWindow(5, time.Minute)
	p.Clock = limiter.ClockBackend
	subject := limitertest.Subject()
	before := evalshaCalls(t, s)
	const flood = 2000
	denied := 0
	for i := 0; i < 5+flood; i++ {
		o, _ := evaluate(r, p, subject, "")
		e, ok := o.(limiter.Evaluated)
		if !ok {
			t.Fatalf("outcome %#v", o)
		}
		if !e.Allowed {
			denied++
			if e.RetryAfter <= 0 || e.RetryAfter > time.Minute || e.Remaining != 0 {
				t.Fatalf("denial %+v", e.Decision)
			}
		}
	}
	calls := evalshaCalls(t, s) - before
	if denied != flood {
		t.Fatalf("%d denied, want %d", denied, flood)
	}
	if perRequest := float64(calls-5) / flood; perRequest > 0.01 {
		t.Fatalf("%d EVALSHA calls for 5 allowed and %d denied: %.4f a denied request", calls, flood, perRequest)
	}
}

// A remembered denial ends exactly when the backend's would, and stands
// only for the cost it refused.
func TestARememberedDenialEndsOnTimeAndOnlyForItsCost(t *testing.T) {
	s := redistest.Start(t)
	clock := limitertest.NewClock()
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}, Clock: clock})
	p := limitertest.TokenBucket(3, 1, time.Second)
	p.MaxCost = 3
	subject := limitertest.Subject()
	ask := func(cost int64) limiter.Decision {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		o := r.Evaluate(ctx, limiter.Request{Policies: limitertest.One(p), Subject: subject, Cost: cost})
		e, ok := o.(limiter.Evaluated)
		if !ok {
			t.Fatalf("outcome %#v", o)
		}
		return e.Decision
	}
	if d := ask(2); !d.Allowed {
		t.Fatalf("first %+v", d)
	}
	// One token left: cost 3 waits two periods.
	if d := ask(3); d.Allowed || d.RetryAfter != 2*time.Second {
		t.Fatalf("cost 3: %+v, want denied for 2s", d)
	}
	before := evalshaCalls(t, s)
	// Remembered for a millisecond less than Redis said, for its rounding.
	clock.Advance(2*time.Second - 2*time.Millisecond)
	if d := ask(3); d.Allowed || d.RetryAfter != 2*time.Millisecond {
		t.Fatalf("cost 3 just before: %+v, want denied for 2ms", d)
	}
	if calls := evalshaCalls(t, s) - before; calls != 0 {
		t.Fatalf("%d calls for a remembered denial", calls)
	}
	// Cost 1 was never refused: Redis decides, and admits it.
	if d := ask(1); !d.Allowed {
		t.Fatalf("cost 1: %+v", d)
	}
	clock.Advance(2 * time.Millisecond)
	if d := ask(2); !d.Allowed {
		t.Fatalf("cost 2 once the periods passed: %+v", d)
	}
}

// The sliding counter's decisions are estimates: its denials go to Redis
// every time.
func TestApproximateDenialsAreNotRemembered(t *testing.T) {
	s := redistest.Start(t)
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
	p := limitertest.SlidingCounter(2, time.Minute)
	p.Clock = limiter.ClockBackend
	subject := limitertest.Subject()
	for i := 0; i < 2; i++ {
		mustAllow(t, first(evaluate(r, p, subject, "")))
	}
	before := evalshaCalls(t, s)
	for i := 0; i < 10; i++ {
		if o, _ := evaluate(r, p, subject, ""); o.(limiter.Evaluated).Allowed {
			t.Fatal("allowed over the limit")
		}
	}
	if calls := evalshaCalls(t, s) - before; calls != 10 {
		t.Fatalf("%d calls for 10 approximate denials, want 10", calls)
	}
}
