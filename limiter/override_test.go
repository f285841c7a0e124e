package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
)

// overrideExpires checks that an override of 5 on a policy of 1 applies
// until its expiry, then is gone by itself: decided by the policy again,
// and off the list. pass moves time past the expiry.
func overrideExpires(t *testing.T, b limiter.Backend, now time.Time, pass func()) {
	t.Helper()
	ctx := context.Background()
	p := limitertest.FixedWindow(1, time.Hour)
	s := limitertest.Subject()
	req := limiter.Request{Policies: limitertest.One(p), Subject: s, Cost: 1}
	if err := b.Overrides().Set(ctx, req, 0, limiter.Override{Route: "r", Policy: p.Name, Pseudonym: s, Limit: 5, Expires: now.Add(300 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if e := b.Evaluate(ctx, req).(limiter.Evaluated); !e.Allowed {
			t.Fatalf("request %d under the override: denied", i+1)
		}
	}
	pass()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		e := b.Evaluate(ctx, req).(limiter.Evaluated)
		list, err := b.Overrides().List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !e.Allowed && len(list) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("past its expiry the override still applies (allowed %v) or is listed (%d)", e.Allowed, len(list))
		}
	}
}

func TestAnOverrideExpiresByItselfInMemory(t *testing.T) {
	clock := limitertest.NewClock()
	m := limiter.NewMemory(limiter.MemoryOptions{Clock: clock})
	defer m.Close()
	overrideExpires(t, m, clock.Now(), func() { clock.Advance(time.Second) })
}

func TestAnOverrideExpiresByItselfOnRedis(t *testing.T) {
	s := redistest.Start(t)
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
	overrideExpires(t, r, time.Now(), func() {})
}
