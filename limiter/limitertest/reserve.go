package limitertest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
)

// settleAt settles the i-th policy of the admission e at cost, and fails
// the test unless the backend took it.
func settleAt(t *testing.T, b Backend, e limiter.Evaluated, i int, cost int64) {
	t.Helper()
	req := e.Admitted().Settlement(i, cost)
	req.EvaluationID, req.NewID = Subject(), true
	if o := b.Evaluate(ctx(t), req); !isEvaluated(o) {
		t.Fatalf("settlement of policy %d at %d: outcome %#v, want Evaluated", i, cost, o)
	}
}

func isEvaluated(o limiter.Outcome) bool {
	_, ok := o.(limiter.Evaluated)
	return ok
}

// outcome is o, which must be Evaluated.
func outcome(t *testing.T, o limiter.Outcome) limiter.Evaluated {
	t.Helper()
	e, ok := o.(limiter.Evaluated)
	if !ok {
		t.Fatalf("outcome %#v, want Evaluated", o)
	}
	return e
}

// admitOne is one admission of the response-charged p for s.
func admitOne(t *testing.T, b Backend, p *limiter.Policy, s string) limiter.Evaluated {
	t.Helper()
	return outcome(t, b.Evaluate(ctx(t), limiter.Request{Policies: One(p), Subject: s, Cost: 1, EvaluationID: Subject(), NewID: true}))
}

// reserveLeft is what the response-charged p has left for s, read by an
// admission that reserves and is settled at 0 at once.
func reserveLeft(t *testing.T, b Backend, p *limiter.Policy, s string) int64 {
	t.Helper()
	e := admitOne(t, b, p, s)
	if !e.Allowed {
		return e.Remaining
	}
	settleAt(t, b, e, 0, 0)
	return e.Remaining + p.Reserve
}

// usage is a fixed window of limit a minute charged by a cost header of
// at most limit, reserving reserve.
func usage(limit, reserve int64) *limiter.Policy {
	p := FixedWindow(limit, time.Minute)
	p.CostHeader, p.Reserve = "X-Usage-Cost", reserve
	return p
}

// runReserve holds a backend to the reserves of response-charged
// policies (Policy.Reserve, Admitted.Settlement).
func runReserve(t *testing.T, newBackend Factory) {
	t.Run("a burst on the last units admits at most what is left over the reserve", func(t *testing.T) {
		for _, c := range []struct {
			name          string
			reserve, left int64
		}{
			{"reserve 1, the last unit", 1, 1},
			{"reserve 50, the last unit", 50, 1},
			{"reserve 50, 100 left", 50, 100},
			{"reserve 50, 149 left", 50, 149},
		} {
			t.Run(c.name, func(t *testing.T) {
				b := newBackend(t, NewClock())
				p := usage(200, c.reserve)
				s := Subject()
				if spent := 200 - c.left; spent > 0 {
					evaluated(t, b.Evaluate(ctx(t), limiter.Request{Policies: One(p), Subject: s, Cost: spent, EvaluationID: Subject(), Phase: limiter.Settlement}))
				}
				var admitted atomic.Int64
				var wg sync.WaitGroup
				for range 40 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if e := admitOne(t, b, p, s); e.Allowed {
							admitted.Add(1)
						}
					}()
				}
				wg.Wait()
				if got, want := admitted.Load(), c.left/c.reserve; got != want {
					t.Fatalf("%d of 40 admitted, want %d (%d left, reserve %d)", got, want, c.left, c.reserve)
				}
			})
		}
	})
	t.Run("a settlement above the reserve charges the rest, past the quota", func(t *testing.T) {
		for _, p := range []*limiter.Policy{usage(100, 10), slidingUsage(100, 10), bucketUsage(100, 10)} {
			b := newBackend(t, NewClock())
			s := Subject()
			e := admitOne(t, b, p, s)
			if !e.Allowed || e.Remaining != 90 {
				t.Fatalf("%s: admission: allowed %v, %d left; want allowed with 90 (10 reserved)", p.Algorithm, e.Allowed, e.Remaining)
			}
			settleAt(t, b, e, 0, 40)
			if n := reserveLeft(t, b, p, s); n != 60 {
				t.Fatalf("%s: %d left after a cost of 40, want 60", p.Algorithm, n)
			}
			// Two in flight on 60: 100 settled takes the budget to -50.
			a, c := admitOne(t, b, p, s), admitOne(t, b, p, s)
			settleAt(t, b, a, 0, 100)
			settleAt(t, b, c, 0, 10)
			// (A sliding counter's refusal says 0 for a debt.)
			want := int64(-50)
			if p.Algorithm == limiter.SlidingCounter {
				want = 0
			}
			if e := admitOne(t, b, p, s); e.Allowed || e.Remaining != want {
				t.Fatalf("%s: in debt: allowed %v, %d left; want refused at %d", p.Algorithm, e.Allowed, e.Remaining, want)
			}
		}
	})
	t.Run("a settlement below the reserve gives the difference back", func(t *testing.T) {
		for _, p := range []*limiter.Policy{usage(100, 50), slidingUsage(100, 50), bucketUsage(100, 50)} {
			b := newBackend(t, NewClock())
			s := Subject()
			e1, e2 := admitOne(t, b, p, s), admitOne(t, b, p, s)
			if !e1.Allowed || !e2.Allowed || e2.Remaining != 0 {
				t.Fatalf("%s: two admissions: %v %v, %d left; want both, 0 left", p.Algorithm, e1.Allowed, e2.Allowed, e2.Remaining)
			}
			if e := admitOne(t, b, p, s); e.Allowed {
				t.Fatalf("%s: a third admitted with every unit reserved", p.Algorithm)
			}
			settleAt(t, b, e1, 0, 10)
			settleAt(t, b, e2, 0, 0)
			if n := reserveLeft(t, b, p, s); n != 90 {
				t.Fatalf("%s: %d left after costs of 10 and 0, want 90", p.Algorithm, n)
			}
		}
	})
	t.Run("a settlement after its window ended charges the new window only beyond the reserve", func(t *testing.T) {
		clock := NewClock()
		b := newBackend(t, clock)
		p := usage(100, 50)
		s := Subject()
		below, above := admitOne(t, b, p, s), admitOne(t, b, p, s)
		clock.Advance(time.Minute)
		// The old window keeps the reserve of 50 for a cost of 10: the new
		// one gets nothing back, and is charged 80 - 50 for the other.
		settleAt(t, b, below, 0, 10)
		settleAt(t, b, above, 0, 80)
		if n := reserveLeft(t, b, p, s); n != 70 {
			t.Fatalf("%d left in the new window, want 70", n)
		}
	})
	t.Run("a policy beside a request-counted one is settled alone, and a shadow one that refused is charged the whole cost", func(t *testing.T) {
		b := newBackend(t, NewClock())
		calls, spend, trial := FixedWindow(10, time.Minute), usage(100, 20), usage(30, 20)
		trial.Shadow = true
		set := limiter.MustPolicySet(calls, spend, trial)
		s := Subject()
		admit := func() limiter.Evaluated {
			return outcome(t, b.Evaluate(ctx(t), limiter.Request{Policies: set, Subject: s, Cost: 1, EvaluationID: Subject(), NewID: true}))
		}
		first, second := admit(), admit()
		if !second.Allowed || second.Policies[0].Remaining != 8 || second.Policies[1].Remaining != 60 || second.Policies[2].Allowed {
			t.Fatalf("second admission: %+v; want allowed, 8 calls and 60 left, the trial refusing", second)
		}
		settleAt(t, b, first, 1, 5)
		settleAt(t, b, first, 2, 5)
		settleAt(t, b, second, 1, 25)
		settleAt(t, b, second, 2, 25)
		if n := reserveLeft(t, b, spend, s); n != 70 {
			t.Fatalf("spend: %d left, want 70 (costs of 5 and 25)", n)
		}
		// The trial: reserved 20 for the first (settled at 5), nothing
		// for the second (charged 25): 30 - 5 - 25 = 0.
		if e := admitOne(t, b, trial, s); e.Allowed || e.Remaining != 0 {
			t.Fatalf("trial: allowed %v, %d left; want refused at 0", e.Allowed, e.Remaining)
		}
		if n := left(t, b, calls, s); n != 8 {
			t.Fatalf("calls: %d left, want 8: a settlement charges no other policy", n)
		}
	})
}

func slidingUsage(limit, reserve int64) *limiter.Policy {
	p := SlidingCounter(limit, time.Minute)
	p.CostHeader, p.Reserve = "X-Usage-Cost", reserve
	return p
}

func bucketUsage(capacity, reserve int64) *limiter.Policy {
	p := TokenBucket(capacity, 1, time.Hour)
	p.CostHeader, p.Reserve = "X-Usage-Cost", reserve
	return p
}
