package limitertest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
)

// all asks for the policies of ps at once and returns each one's decision
// with the summary.
func all(t *testing.T, b Backend, ps *limiter.PolicySet, subject, id string) limiter.Evaluated {
	t.Helper()
	o := b.Evaluate(ctx(t), limiter.Request{Policies: ps, Subject: subject, Cost: 1, EvaluationID: id})
	e, ok := o.(limiter.Evaluated)
	if !ok {
		t.Fatalf("outcome %#v, want Evaluated", o)
	}
	if len(e.Policies) != ps.Len() {
		t.Fatalf("%d decisions for %d policies", len(e.Policies), ps.Len())
	}
	return e
}

// left is what policy p has left for subject, asked alone at cost 1.
func left(t *testing.T, b Backend, p *limiter.Policy, subject string) int64 {
	t.Helper()
	d := evaluated(t, b.Evaluate(ctx(t), limiter.Request{Policies: One(p), Subject: subject, Cost: 1, EvaluationID: Subject()}))
	return d.Remaining + 1
}

// runSeveral holds a backend to the rules of Request.Policies.
func runSeveral(t *testing.T, newBackend Factory) {
	t.Run("several policies: when one denies none is charged", func(t *testing.T) {
		small, large := FixedWindow(2, time.Minute), FixedWindow(10, time.Hour)
		b := newBackend(t, NewClock())
		s := Subject()
		for i := range 5 {
			e := all(t, b, limiter.MustPolicySet(small, large), s, Subject())
			if e.Allowed != (i < 2) {
				t.Fatalf("request %d: allowed %v", i+1, e.Allowed)
			}
			wantLarge := int64(10 - min(i+1, 2))
			if i >= 2 {
				wantLarge = 8 // refused: nothing taken, what is left is reported
			}
			if e.Policies[1].Remaining != wantLarge || !e.Policies[1].Allowed {
				t.Fatalf("request %d: the large policy says %+v, want %d left", i+1, e.Policies[1], wantLarge)
			}
		}
		if n := left(t, b, large, s); n != 8 {
			t.Fatalf("the large policy was charged for refused requests: %d left, want 8", n)
		}
	})
	t.Run("several policies: a denial by one of them stands without charging the others", func(t *testing.T) {
		small, large := FixedWindow(1, time.Minute), TokenBucket(10, 1, time.Hour)
		ps := limiter.MustPolicySet(small, large)
		b := newBackend(t, NewClock())
		s := Subject()
		req := limiter.Request{Policies: ps, Subject: s, Cost: 1}
		if e, ok := b.StandingDenial(req); ok && !e.Allowed {
			t.Fatalf("a fresh subject has a standing denial: %+v", e)
		}
		all(t, b, ps, s, Subject())
		if e := all(t, b, ps, s, Subject()); e.Allowed {
			t.Fatal("the second request fits a window of one")
		}
		for range 3 {
			e, ok := b.StandingDenial(req)
			if !ok || e.Allowed || e.PolicyDecision(0).Allowed || !e.PolicyDecision(1).Allowed {
				t.Fatalf("standing denial %+v (%v), want the window's denial beside the bucket's allow", e, ok)
			}
			if e.PolicyDecision(1).Remaining != 9 || e.RetryAfter <= 0 {
				t.Fatalf("standing denial %+v, want 9 tokens left and a retry time", e)
			}
		}
		if n := left(t, b, large, s); n != 9 {
			t.Fatalf("the bucket has %d left, want 9: a standing denial charged it", n)
		}
	})
	t.Run("several policies of every algorithm are decided together", func(t *testing.T) {
		ps := limiter.MustPolicySet(FixedWindow(5, time.Hour), TokenBucket(3, 1, time.Hour), SlidingCounter(4, time.Hour))
		b := newBackend(t, NewClock())
		s := Subject()
		for i := range 5 {
			e := all(t, b, ps, s, Subject())
			if e.Allowed != (i < 3) {
				t.Fatalf("request %d: allowed %v, want the bucket's 3 only", i+1, e.Allowed)
			}
			if i >= 3 {
				if e.Policies[1].Allowed || e.RetryAfter != e.Policies[1].RetryAfter {
					t.Fatalf("request %d: %+v, want the bucket's denial and wait", i+1, e)
				}
			}
		}
		if n := left(t, b, ps.Policy(0), s); n != 2 {
			t.Fatalf("fixed window: %d left, want 2", n)
		}
		if n := left(t, b, ps.Policy(2), s); n != 1 {
			t.Fatalf("sliding counter: %d left, want 1", n)
		}
	})
	t.Run("several policies: the longest wait of the denying ones", func(t *testing.T) {
		ps := limiter.MustPolicySet(FixedWindow(1, time.Minute), FixedWindow(1, time.Hour))
		b := newBackend(t, NewClock())
		s := Subject()
		all(t, b, ps, s, Subject())
		e := all(t, b, ps, s, Subject())
		if e.Allowed || e.RetryAfter != time.Hour || e.Policies[0].RetryAfter != time.Minute {
			t.Fatalf("got %+v", e)
		}
	})
	t.Run("a shadow policy never refuses and is charged only when it allows", func(t *testing.T) {
		enforced := FixedWindow(5, time.Minute)
		trial := FixedWindow(2, time.Minute)
		trial.Shadow = true
		b := newBackend(t, NewClock())
		s := Subject()
		for i := range 4 {
			e := all(t, b, limiter.MustPolicySet(enforced, trial), s, Subject())
			if !e.Allowed || e.Policies[1].Allowed != (i < 2) {
				t.Fatalf("request %d: %+v", i+1, e)
			}
		}
		if n := left(t, b, enforced, s); n != 1 {
			t.Fatalf("the enforced policy: %d left, want 1", n)
		}
	})
	t.Run("a retried evaluation of several policies returns its first result and is charged once", func(t *testing.T) {
		ps := limiter.MustPolicySet(FixedWindow(3, time.Minute), TokenBucket(5, 1, time.Minute))
		clock := NewClock()
		b := newBackend(t, clock)
		s := Subject()
		first := all(t, b, ps, s, "eval-1")
		clock.Advance(time.Second)
		again := all(t, b, ps, s, "eval-1")
		if again.Decision != first.Decision || again.Policies[0] != first.Policies[0] || again.Policies[1] != first.Policies[1] {
			t.Fatalf("retry got %+v, first was %+v", again, first)
		}
		if n := left(t, b, ps.Policy(0), s); n != 2 {
			t.Fatalf("%d left, want 2", n)
		}
	})
	t.Run("concurrent requests with several policies admit exactly the smallest limit and charge only those", func(t *testing.T) {
		small, large := TokenBucket(5, 1, time.Hour), FixedWindow(100, time.Hour)
		b := newBackend(t, NewClock())
		s := Subject()
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				o := b.Evaluate(ctx(t), limiter.Request{Policies: limiter.MustPolicySet(small, large), Subject: s, Cost: 1, EvaluationID: Subject()})
				if e, ok := o.(limiter.Evaluated); ok && e.Allowed {
					allowed.Add(1)
				}
			}()
		}
		wg.Wait()
		if n := allowed.Load(); n != 5 {
			t.Fatalf("%d of 40 allowed, want 5", n)
		}
		if n := left(t, b, large, s); n != 95 {
			t.Fatalf("the large policy: %d left, want 95", n)
		}
	})
}
