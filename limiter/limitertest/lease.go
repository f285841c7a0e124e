package limitertest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
)

// Instances returns n backends that share one store, as n gateway
// instances pointed at one Redis do, reading time from clock. A backend
// whose store is its process (memory) returns the same backend n times.
type Instances func(t *testing.T, clock limiter.Clock, n int) []Backend

// Leased returns p with a lease of budget of n units.
func Leased(p *limiter.Policy, n int64) *limiter.Policy {
	p.Lease = n
	return p
}

// RunLeases holds backends to the rules of leases of budget
// (Policy.Lease): across any number of instances nothing is admitted past
// the limit, an instance is refused early by at most what the others hold
// unused, a lease ends with its period, and an idle lease gives its units
// back. A backend without leases (memory) is exact, and passes as such.
func RunLeases(t *testing.T, newInstances Instances) {
	t.Run("leases: instances that each ask until refused admit exactly the limit together", func(t *testing.T) {
		for _, n := range []int{2, 3, 4} {
			for _, p := range []*limiter.Policy{Leased(FixedWindow(100, time.Minute), 10), Leased(TokenBucket(100, 1, time.Minute), 10)} {
				bs := newInstances(t, NewClock(), n)
				s := Subject()
				var admitted atomic.Int64
				var wg sync.WaitGroup
				for _, b := range bs {
					for range 6 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for {
								o := b.Evaluate(ctx(t), limiter.Request{Policies: One(p), Subject: s, Cost: 1, EvaluationID: Subject()})
								if e, ok := o.(limiter.Evaluated); !ok || !e.Allowed {
									return
								}
								admitted.Add(1)
							}
						}()
					}
				}
				wg.Wait()
				if got := admitted.Load(); got != 100 {
					t.Fatalf("%s, %d instances: %d admitted, want the limit, 100", p.Algorithm, n, got)
				}
			}
		}
	})
	t.Run("leases: an instance is refused early by at most what the others hold", func(t *testing.T) {
		const lease, n = 5, 4
		p := Leased(FixedWindow(4*lease, time.Minute), lease)
		bs := newInstances(t, NewClock(), n)
		s := Subject()
		admitted := 0
		for _, b := range bs {
			if ask(t, b, One(p), s, 1) {
				admitted++
			}
		}
		for ask(t, bs[0], One(p), s, 1) {
			admitted++
		}
		if least := 4*lease - (n-1)*(lease-1); admitted < least || admitted > 4*lease {
			t.Fatalf("first refused after %d admitted, want between %d and %d", admitted, least, 4*lease)
		}
	})
	t.Run("leases: a lease is smaller when less is left, and a cost takes its units", func(t *testing.T) {
		// 17 is no multiple of the lease: the last lease is short of it.
		p := Leased(FixedWindow(17, time.Minute), 5)
		bs := newInstances(t, NewClock(), 2)
		s := Subject()
		admitted := int64(0)
		for _, cost := range []int64{2, 1, 3} {
			for open := true; open; {
				open = false
				for _, b := range bs {
					if ask(t, b, One(p), s, cost) {
						admitted += cost
						open = true
					}
				}
			}
		}
		if admitted > 17 || admitted < 17-2 {
			t.Fatalf("%d admitted, want at most 17 and at least 15 (the last cost of 3 may not fit)", admitted)
		}
	})
	for _, c := range []struct {
		name, full, past string
		p                *limiter.Policy
	}{
		{"leases: a lease ends with its window", "of the new window", "admitted past the limit from a lease of the window before",
			Leased(FixedWindow(10, time.Second), 5)},
		// A bucket that fills again within one period: tokens held past it
		// would come on top of a full bucket.
		{"leases: a token bucket's lease ends with its next refill", "of a full bucket", "admitted past an empty bucket from a lease taken before its refill",
			Leased(TokenBucket(10, 10, time.Second), 4)},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := NewClock()
			bs := newInstances(t, clock, 2)
			s := Subject()
			if !ask(t, bs[0], One(c.p), s, 1) {
				t.Fatal("the first request was refused")
			}
			clock.Advance(time.Second)
			for i := range 10 {
				if !ask(t, bs[1], One(c.p), s, 1) {
					t.Fatalf("request %d %s refused", i+1, c.full)
				}
			}
			if ask(t, bs[0], One(c.p), s, 1) {
				t.Fatal(c.past)
			}
		})
	}
	t.Run("leases: an idle lease gives its units back for another instance to use", func(t *testing.T) {
		p := Leased(FixedWindow(10, time.Minute), 5)
		clock := NewClock()
		bs := newInstances(t, clock, 2)
		s := Subject()
		admitted := 0
		for ask(t, bs[0], One(p), s, 1) {
			admitted++
			if admitted == 8 {
				break
			}
		}
		for ask(t, bs[1], One(p), s, 1) {
			admitted++
		}
		admitted += untilIdleGivesBack(t, clock, bs[1], One(p), s, 10-admitted)
		if admitted != 10 {
			t.Fatalf("%d admitted, want every unit of the limit, 10", admitted)
		}
	})
	t.Run("leases: a request takes from every lease or from none", func(t *testing.T) {
		large, small := Leased(FixedWindow(10, time.Minute), 4), Leased(FixedWindow(3, time.Minute), 2)
		clock := NewClock()
		bs := newInstances(t, clock, 2)
		s := Subject()
		both := limiter.MustPolicySet(large, small)
		admitted := 0
		for range 6 {
			if ask(t, bs[0], both, s, 1) {
				admitted++
			}
		}
		if admitted != 3 {
			t.Fatalf("%d admitted, want the small policy's 3", admitted)
		}
		// The refused requests kept none of the large policy's units: once
		// the first instance idles they are all the second's.
		got := untilIdleGivesBack(t, clock, bs[1], One(large), s, 7)
		if got != 7 {
			t.Fatalf("the large policy admitted %d more alone, want 7", got)
		}
	})
	t.Run("leases: a shadow policy's lease never refuses", func(t *testing.T) {
		enforced, shadow := Leased(FixedWindow(5, time.Minute), 3), Leased(FixedWindow(2, time.Minute), 2)
		shadow.Shadow = true
		b := newInstances(t, NewClock(), 1)[0]
		s := Subject()
		// A route's list, made once, as Request.Policies asks.
		both := limiter.MustPolicySet(enforced, shadow)
		for i := range 6 {
			o := b.Evaluate(ctx(t), limiter.Request{Policies: both, Subject: s, Cost: 1, EvaluationID: Subject()})
			e, ok := o.(limiter.Evaluated)
			if !ok {
				t.Fatalf("request %d: outcome %#v", i+1, o)
			}
			if e.Allowed != (i < 5) || e.PolicyDecision(1).Allowed != (i < 2) {
				t.Fatalf("request %d: allowed %v, the shadow policy's %v", i+1, e.Allowed, e.PolicyDecision(1).Allowed)
			}
		}
	})
}

// ask reports whether the request of ps, subject and cost was admitted.
func ask(t *testing.T, b Backend, ps *limiter.PolicySet, subject string, cost int64) bool {
	t.Helper()
	o := b.Evaluate(ctx(t), limiter.Request{Policies: ps, Subject: subject, Cost: cost, EvaluationID: Subject()})
	e, ok := o.(limiter.Evaluated)
	if !ok {
		t.Fatalf("outcome %#v, want Evaluated", o)
	}
	return e.Allowed
}

// untilIdleGivesBack lets every instance idle past a lease's idle time
// and then asks b until it is refused, for want admissions at most: the
// units come back in the background, so it waits for them, a few seconds
// at most. It returns how many were admitted.
func untilIdleGivesBack(t *testing.T, clock *Clock, b Backend, ps *limiter.PolicySet, subject string, want int) int {
	t.Helper()
	admitted := 0
	for try := 0; try < 20 && admitted < want; try++ {
		clock.Advance(1100 * time.Millisecond)
		time.Sleep(100 * time.Millisecond)
		for admitted < want+1 && ask(t, b, ps, subject, 1) {
			admitted++
		}
	}
	return admitted
}
