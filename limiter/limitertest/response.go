package limitertest

import (
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
)

// runResponseCharged holds a backend to the two phases of a policy
// charged by the response (limiter.Phase).
func runResponseCharged(t *testing.T, newBackend Factory) {
	// ask is one request at cost in phase, under an evaluation ID of its own
	// unless id is given.
	ask := func(t *testing.T, b Backend, ps *limiter.PolicySet, s string, cost int64, phase limiter.Phase, id string) limiter.Evaluated {
		t.Helper()
		if id == "" {
			id = Subject()
		}
		o := b.Evaluate(ctx(t), limiter.Request{Policies: ps, Subject: s, Cost: cost, EvaluationID: id, Phase: phase})
		e, ok := o.(limiter.Evaluated)
		if !ok {
			t.Fatalf("outcome %#v, want Evaluated", o)
		}
		return e
	}
	t.Run("a response-charged policy is charged its reserve at admission", func(t *testing.T) {
		for _, p := range []*limiter.Policy{FixedWindow(2, time.Minute), SlidingCounter(2, time.Minute), TokenBucket(2, 1, time.Minute)} {
			p.CountStatuses = limiter.StatusSet(401, 403)
			b := newBackend(t, NewClock())
			s := Subject()
			for i, want := range []int64{1, 0} {
				if e := ask(t, b, One(p), s, 1, limiter.Admission, ""); !e.Allowed || e.Remaining != want {
					t.Fatalf("%s: admission %d: allowed %v, remaining %d; want allowed with %d left", p.Algorithm, i+1, e.Allowed, e.Remaining, want)
				}
			}
			if e := ask(t, b, One(p), s, 1, limiter.Admission, ""); e.Allowed || e.Remaining != 0 {
				t.Fatalf("%s: third admission: allowed %v, remaining %d; want refused with 0 left", p.Algorithm, e.Allowed, e.Remaining)
			}
		}
	})
	t.Run("a settlement charges past the quota, and admissions are refused until the debt is paid back", func(t *testing.T) {
		clock := NewClock()
		b := newBackend(t, clock)
		p := TokenBucket(100, 10, time.Second)
		p.CostHeader = "X-Usage-Cost"
		ps := One(p)
		s := Subject()
		for i, want := range []int64{60, 20, -20} {
			if e := ask(t, b, ps, s, 40, limiter.Settlement, ""); !e.Allowed || e.Remaining != want {
				t.Fatalf("charge %d: allowed %v, remaining %d; want allowed with %d left", i+1, e.Allowed, e.Remaining, want)
			}
		}
		// 21 tokens short of 1: three refills of 10.
		e := ask(t, b, ps, s, 1, limiter.Admission, "")
		if e.Allowed || e.Remaining != -20 || e.RetryAfter != 3*time.Second {
			t.Fatalf("in debt: allowed %v, remaining %d, retry %s; want denied, -20, 3s", e.Allowed, e.Remaining, e.RetryAfter)
		}
		clock.Advance(2 * time.Second)
		if e := ask(t, b, ps, s, 1, limiter.Admission, ""); e.Allowed {
			t.Fatal("admitted while the debt is not yet paid back")
		}
		clock.Advance(time.Second)
		if e := ask(t, b, ps, s, 1, limiter.Admission, ""); !e.Allowed || e.Remaining != 9 {
			t.Fatalf("paid back: allowed %v, remaining %d; want allowed with 9 left (1 reserved)", e.Allowed, e.Remaining)
		}
	})
	// A policy in debt: settlements charge past its quota, and admissions
	// are refused until the debt is paid back.
	const settle = limiter.Settlement
	t.Run("a window in debt admits again when the next window starts", func(t *testing.T) {
		p := FixedWindow(5, time.Minute)
		p.CountStatuses = limiter.StatusSet(401)
		sequence(t, newBackend, p, []want{
			{phase: settle, cost: 1, allowed: true, remaining: 4, reset: time.Minute},
			{phase: settle, cost: 1, allowed: true, remaining: 3, reset: time.Minute},
			{phase: settle, cost: 1, allowed: true, remaining: 2, reset: time.Minute},
			{phase: settle, cost: 1, allowed: true, remaining: 1, reset: time.Minute},
			{phase: settle, cost: 1, allowed: true, remaining: 0, reset: time.Minute},
			{cost: 1, remaining: 0, retry: time.Minute, reset: time.Minute},
			{phase: settle, cost: 1, allowed: true, remaining: -1, reset: time.Minute},
			{advance: time.Minute, cost: 1, allowed: true, remaining: 4, reset: time.Minute}, // 1 reserved
		})
	})
	t.Run("a sliding counter in debt admits again once the debt has decayed", func(t *testing.T) {
		p := SlidingCounter(5, time.Minute)
		p.CountStatuses = limiter.StatusSet(401)
		sequence(t, newBackend, p, []want{
			{phase: settle, cost: 1, allowed: true, remaining: 4, reset: 2 * time.Minute},
			{phase: settle, cost: 1, allowed: true, remaining: 3, reset: 2 * time.Minute},
			{phase: settle, cost: 1, allowed: true, remaining: 2, reset: 2 * time.Minute},
			{phase: settle, cost: 1, allowed: true, remaining: 1, reset: 2 * time.Minute},
			{phase: settle, cost: 1, allowed: true, remaining: 0, reset: 2 * time.Minute},
			{phase: settle, cost: 1, allowed: true, remaining: -1, reset: 2 * time.Minute},
			{phase: settle, cost: 1, allowed: true, remaining: -2, reset: 2 * time.Minute},
			// 7 spent: the next window's weight of them must fall to 4,
			// which it does 17,143 ms into it.
			{cost: 1, remaining: 0, retry: 77143 * time.Millisecond, reset: 2 * time.Minute},
			{advance: 77142 * time.Millisecond, cost: 1, remaining: 0, retry: time.Millisecond, reset: 42858 * time.Millisecond},
			{advance: time.Millisecond, cost: 1, allowed: true, remaining: 0, reset: 102857 * time.Millisecond}, // 1 reserved
		})
	})
	t.Run("a retried settlement is charged once", func(t *testing.T) {
		b := newBackend(t, NewClock())
		p := FixedWindow(5, time.Minute)
		p.CountStatuses = limiter.StatusSet(401)
		ps := One(p)
		s, id := Subject(), Subject()
		for i := range 6 {
			// A debt's negative remaining survives the replay too.
			for range 2 {
				if e := ask(t, b, ps, s, 2, limiter.Settlement, id); e.Remaining != 3 {
					t.Fatalf("try %d: remaining %d, want 3", i+1, e.Remaining)
				}
			}
		}
		id = Subject()
		for range 2 {
			for range 2 {
				ask(t, b, ps, s, 4, limiter.Settlement, id)
			}
		}
		if e := ask(t, b, ps, s, 1, limiter.Settlement, id); e.Remaining != -1 {
			t.Fatalf("replayed debt: remaining %d, want -1", e.Remaining)
		}
	})
	t.Run("mixed with a request-counted policy, the admission is atomic: one refuses, neither is charged", func(t *testing.T) {
		b := newBackend(t, NewClock())
		counted, failures := FixedWindow(3, time.Minute), FixedWindow(1, time.Minute)
		failures.CountStatuses = limiter.StatusSet(401)
		ps := limiter.MustPolicySet(counted, failures)
		s := Subject()
		e := ask(t, b, ps, s, 1, limiter.Admission, "")
		if !e.Allowed || e.Policies[0].Remaining != 2 || e.Policies[1].Remaining != 0 {
			t.Fatalf("first: %+v; want allowed, 2 left and 0 (reserved)", e)
		}
		settleAt(t, b, e, 1, 1)
		e = ask(t, b, ps, s, 1, limiter.Admission, "")
		if e.Allowed || e.Policies[0].Remaining != 2 || !e.Policies[0].Allowed || e.Policies[1].Allowed || e.Policies[1].Remaining != 0 {
			t.Fatalf("after a failure: %+v; want denied by the second, the first uncharged with 2 left", e)
		}
		if n := left(t, b, counted, s); n != 2 {
			t.Fatalf("the request-counted policy has %d left, want 2", n)
		}
	})
}
