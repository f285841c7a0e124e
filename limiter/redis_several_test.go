package limiter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
)

func severalPolicies() *limiter.PolicySet {
	small, large := limitertest.FixedWindow(2, time.Minute), limitertest.TokenBucket(100, 1, time.Hour)
	small.Clock, large.Clock = limiter.ClockBackend, limiter.ClockBackend
	return limiter.MustPolicySet(small, large)
}

func evaluateAll(t *testing.T, b interface {
	Evaluate(context.Context, limiter.Request) limiter.Outcome
}, ps *limiter.PolicySet, subject, id string) limiter.Evaluated {
	t.Helper()
	o := b.Evaluate(context.Background(), limiter.Request{Policies: ps, Subject: subject, Cost: 1, EvaluationID: id,
		NewID: id != "", Deadline: time.Now().Add(time.Second)})
	e, ok := o.(limiter.Evaluated)
	if !ok {
		t.Fatalf("outcome %#v, want Evaluated", o)
	}
	return e
}

func TestSeveralPoliciesOnRedis(t *testing.T) {
	t.Run("a lost reply is retried and charged once on every policy", func(t *testing.T) {
		s := redistest.Start(t)
		proxy := redistest.StartProxy(t, s.Addr)
		// No denial cache: its resets subscription would share the proxy,
		// and DropNextReply could drop the SUBSCRIBE reply instead.
		r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{proxy.Addr}, DenialCacheEntries: -1})
		ps := severalPolicies()
		subject := limitertest.Subject()
		evaluateAll(t, r, ps, subject, "warm")
		proxy.DropNextReply()
		e := evaluateAll(t, r, ps, subject, "lost")
		if proxy.Dropped() != 1 {
			t.Fatal("no reply was dropped")
		}
		if !e.Allowed || e.Policies[0].Remaining != 0 || e.Policies[1].Remaining != 98 {
			t.Fatalf("after the retry %+v, want 0 and 98 left", e.Policies)
		}
		admin := s.Client(t)
		if c := admin.HGet(context.Background(), r.Key(ps.Policy(1), subject), "c").Val(); c != "98" {
			t.Fatalf("stored tokens %q, want 98: the lost call was charged twice", c)
		}
	})
	t.Run("a flooding subject refused by one policy is answered without Redis", func(t *testing.T) {
		s := redistest.Start(t)
		r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
		ps := severalPolicies()
		subject := limitertest.Subject()
		before := evalshaCalls(t, s)
		const flood = 1000
		for i := range 2 + flood {
			e := evaluateAll(t, r, ps, subject, "")
			if e.Allowed != (i < 2) {
				t.Fatalf("request %d: %+v", i+1, e)
			}
			if i >= 2 && (e.Policies[1].Remaining != 98 || e.RetryAfter <= 0 || e.RetryAfter > time.Minute) {
				t.Fatalf("denial %d: %+v", i+1, e)
			}
		}
		if calls := evalshaCalls(t, s) - before; float64(calls-2)/flood > 0.01 {
			t.Fatalf("%d EVALSHA calls for 2 allowed and %d refused", calls, flood)
		}
	})
	t.Run("the fallback decides every policy with divided budgets", func(t *testing.T) {
		s := redistest.Start(t)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		b, err := limiter.Open(ctx, limiter.Options{Kind: limiter.KindRedis,
			Redis:    limiter.RedisOptions{Addrs: []string{s.Addr}, DenialCacheEntries: -1},
			Fallback: limiter.FallbackOptions{Instances: 2}})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		small, large := limitertest.FixedWindow(10, time.Minute), limitertest.FixedWindow(4, time.Hour)
		small.Clock, large.Clock = limiter.ClockBackend, limiter.ClockBackend
		ps := limiter.MustPolicySet(small, large)
		subject := limitertest.Subject()
		s.Kill()
		var admitted int
		for i := range 4 {
			e := evaluateAll(t, b, ps, subject, fmt.Sprint("down-", i))
			if !e.Fallback {
				t.Fatalf("not a fallback decision: %+v", e)
			}
			if e.Allowed {
				admitted++
			}
		}
		if admitted != 2 {
			t.Fatalf("%d admitted, want ceil(4/2) = 2", admitted)
		}
	})
}
