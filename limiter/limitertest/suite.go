// Package limitertest is the conformance suite every limiter backend passes:
// the same scenarios, with the same expected numbers, against any backend.
package limitertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
)

// Backend is what the suite drives.
type Backend interface {
	Evaluate(ctx context.Context, req limiter.Request) limiter.Outcome
	StandingDenial(req limiter.Request) (limiter.Evaluated, bool)
}

// Factory returns a fresh backend that reads time from clock for policies
// whose Clock is limiter.ClockGateway. The suite uses only such policies, so
// that it can move time by hand.
type Factory func(t *testing.T, clock limiter.Clock) Backend

// Clock is a hand-moved clock, safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock set to a whole second, so window arithmetic in the
// scenarios starts on a boundary.
func NewClock() *Clock {
	return &Clock{now: time.Unix(1_800_000_000, 0)}
}

func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock; a negative d moves it back.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Subject returns a random pseudonym-shaped subject, so runs against a shared
// store never collide.
func Subject() string {
	var b [16]byte
	rand.Read(b[:])
	return "v1:" + hex.EncodeToString(b[:])
}

// FixedWindow, SlidingCounter and TokenBucket return valid policies with a
// random name, so that runs against a shared store never collide.
func FixedWindow(limit int64, window time.Duration) *limiter.Policy {
	p := base(limiter.FixedWindow)
	p.Limit, p.Window, p.MaxCost = limit, window, limit
	return p
}

func SlidingCounter(limit int64, window time.Duration) *limiter.Policy {
	p := base(limiter.SlidingCounter)
	p.Limit, p.Window, p.MaxCost = limit, window, limit
	return p
}

func TokenBucket(capacity, refill int64, period time.Duration) *limiter.Policy {
	p := base(limiter.TokenBucket)
	p.Capacity, p.RefillTokens, p.RefillPeriod, p.MaxCost = capacity, refill, period, capacity
	return p
}

// Concurrency returns a valid concurrency policy of the given limit and
// lease TTL.
func Concurrency(limit int64, leaseTTL time.Duration) *limiter.Policy {
	p := base(limiter.Concurrency)
	p.Limit, p.LeaseTTL, p.MaxCost = limit, leaseTTL, limit
	return p
}

// base is a policy of alg with a random name and limiter.NewPolicy's
// defaults, on the gateway's clock, which the scenarios move by hand.
func base(alg limiter.Algorithm) *limiter.Policy {
	p := limiter.NewPolicy("conf-"+Subject()[3:15], alg)
	p.Clock = limiter.ClockGateway
	return p
}

// want is one expected step of a scenario.
type want struct {
	advance   time.Duration // moved before the request
	phase     limiter.Phase
	cost      int64
	allowed   bool
	remaining int64
	retry     time.Duration
	reset     time.Duration
}

// Run runs the whole suite against the backends newBackend makes.
func Run(t *testing.T, newBackend Factory) {
	t.Run("fixed window admits the limit then denies until the window ends", func(t *testing.T) {
		p := FixedWindow(3, time.Second)
		sequence(t, newBackend, p, []want{
			{cost: 1, allowed: true, remaining: 2, reset: time.Second},
			{advance: 100 * time.Millisecond, cost: 1, allowed: true, remaining: 1, reset: 900 * time.Millisecond},
			{cost: 1, allowed: true, remaining: 0, reset: 900 * time.Millisecond},
			{advance: 150 * time.Millisecond, cost: 1, remaining: 0, retry: 750 * time.Millisecond, reset: 750 * time.Millisecond},
			{advance: 750 * time.Millisecond, cost: 1, allowed: true, remaining: 2, reset: time.Second},
		})
	})
	t.Run("fixed window denial charges nothing", func(t *testing.T) {
		p := FixedWindow(3, time.Second)
		sequence(t, newBackend, p, []want{
			{cost: 2, allowed: true, remaining: 1, reset: time.Second},
			{cost: 2, remaining: 1, retry: time.Second, reset: time.Second},
			{cost: 1, allowed: true, remaining: 0, reset: time.Second},
		})
	})
	t.Run("a standing denial is the denial Evaluate gave, and asking for one charges nothing", func(t *testing.T) {
		clock := NewClock()
		b := newBackend(t, clock)
		p := FixedWindow(2, time.Minute)
		req := limiter.Request{Policies: One(p), Subject: Subject(), Cost: 1}
		standing := func() (limiter.Evaluated, bool) {
			var e limiter.Evaluated
			var ok bool
			for range 5 {
				e, ok = b.StandingDenial(req)
			}
			return e, ok
		}
		if _, ok := standing(); ok {
			t.Fatal("a standing denial for a subject never seen")
		}
		for i := range 2 {
			if d := evaluated(t, b.Evaluate(ctx(t), req)); !d.Allowed {
				t.Fatalf("request %d denied: asking for a standing denial charged", i+1)
			}
			if _, ok := standing(); ok && i == 0 {
				t.Fatal("a standing denial with budget left")
			}
		}
		clock.Advance(10 * time.Second)
		denied := evaluated(t, b.Evaluate(ctx(t), req))
		if denied.Allowed {
			t.Fatal("the third request of two was allowed")
		}
		e, ok := standing()
		if !ok || e.Allowed || e.RetryAfter <= 0 || e.RetryAfter > denied.RetryAfter || e.Limit != 2 {
			t.Fatalf("standing denial %+v %v after the denial %+v", e, ok, denied)
		}
		clock.Advance(50 * time.Second)
		if _, ok := standing(); ok {
			t.Fatal("a denial stands after its window ended")
		}
		if d := evaluated(t, b.Evaluate(ctx(t), req)); !d.Allowed {
			t.Fatal("denied in the next window")
		}
	})
	t.Run("sliding counter weighs the previous window", func(t *testing.T) {
		p := SlidingCounter(4, time.Second)
		sequence(t, newBackend, p, []want{
			{cost: 1, allowed: true, remaining: 3, reset: 2 * time.Second},
			{cost: 1, allowed: true, remaining: 2, reset: 2 * time.Second},
			{cost: 1, allowed: true, remaining: 1, reset: 2 * time.Second},
			{cost: 1, allowed: true, remaining: 0, reset: 2 * time.Second},
			// Full: nothing fits until the next window, and there the four
			// spent now weigh 4*(1000-e)/1000; one fits once that is at most 3,
			// at e = 1000 - 3999/4 = 1000 - 999 = 1ms.
			{advance: 250 * time.Millisecond, cost: 1, remaining: 0, retry: 751 * time.Millisecond, reset: 1750 * time.Millisecond},
			// 250ms into the next window the four weigh floor(4*0.75) = 3.
			{advance: 1000 * time.Millisecond, cost: 1, allowed: true, remaining: 0, reset: 1750 * time.Millisecond},
			// Denied, but 1ms later the four weigh floor(4*0.749) = 2.
			{cost: 1, remaining: 0, retry: time.Millisecond, reset: 1750 * time.Millisecond},
			// 500ms in: floor(4*0.5) + 1 = 3, one more fits.
			{advance: 250 * time.Millisecond, cost: 1, allowed: true, remaining: 0, reset: 1500 * time.Millisecond},
			// Two windows on, nothing is remembered.
			{advance: 2 * time.Second, cost: 1, allowed: true, remaining: 3, reset: 1500 * time.Millisecond},
		})
	})
	t.Run("sliding counter says it is approximate", func(t *testing.T) {
		b := newBackend(t, NewClock())
		d := evaluated(t, b.Evaluate(ctx(t), limiter.Request{Policies: limiter.MustPolicySet(SlidingCounter(2, time.Second)), Subject: Subject(), Cost: 1}))
		if d.Certainty != limiter.Approximate {
			t.Fatalf("certainty = %v, want approximate", d.Certainty)
		}
		d = evaluated(t, b.Evaluate(ctx(t), limiter.Request{Policies: limiter.MustPolicySet(FixedWindow(2, time.Second)), Subject: Subject(), Cost: 1}))
		if d.Certainty != limiter.Certain {
			t.Fatalf("fixed window certainty = %v, want certain", d.Certainty)
		}
	})
	t.Run("token bucket refills whole periods and keeps the partial one", func(t *testing.T) {
		p := TokenBucket(3, 1, time.Second)
		sequence(t, newBackend, p, []want{
			{cost: 1, allowed: true, remaining: 2, reset: time.Second},
			{cost: 1, allowed: true, remaining: 1, reset: 2 * time.Second},
			{cost: 1, allowed: true, remaining: 0, reset: 3 * time.Second},
			{advance: 400 * time.Millisecond, cost: 1, remaining: 0, retry: 600 * time.Millisecond, reset: 2600 * time.Millisecond},
			{advance: 400 * time.Millisecond, cost: 1, remaining: 0, retry: 200 * time.Millisecond, reset: 2200 * time.Millisecond},
			// 1.2s after the first request one whole period has passed; the
			// 200ms of the next one are not lost.
			{advance: 400 * time.Millisecond, cost: 1, allowed: true, remaining: 0, reset: 2800 * time.Millisecond},
			{advance: 800 * time.Millisecond, cost: 1, allowed: true, remaining: 0, reset: 3000 * time.Millisecond},
			{advance: 10 * time.Second, cost: 3, allowed: true, remaining: 0, reset: 3000 * time.Millisecond},
		})
	})
	t.Run("token bucket refills several tokens a period up to capacity", func(t *testing.T) {
		p := TokenBucket(10, 4, 500*time.Millisecond)
		sequence(t, newBackend, p, []want{
			{cost: 10, allowed: true, remaining: 0, reset: 1500 * time.Millisecond},
			{advance: 499 * time.Millisecond, cost: 1, remaining: 0, retry: time.Millisecond, reset: 1001 * time.Millisecond},
			{advance: 1 * time.Millisecond, cost: 5, remaining: 4, retry: 500 * time.Millisecond, reset: 1000 * time.Millisecond},
			{advance: 500 * time.Millisecond, cost: 5, allowed: true, remaining: 3, reset: 1000 * time.Millisecond},
			{advance: 5 * time.Second, cost: 10, allowed: true, remaining: 0, reset: 1500 * time.Millisecond},
		})
	})
	t.Run("subjects and policies do not share budgets", func(t *testing.T) {
		b := newBackend(t, NewClock())
		p, q := FixedWindow(1, time.Minute), FixedWindow(1, time.Minute)
		alice, bob := Subject(), Subject()
		for _, r := range []limiter.Request{{Policies: One(p), Subject: alice}, {Policies: One(p), Subject: bob}, {Policies: One(q), Subject: alice}} {
			r.Cost = 1
			if d := evaluated(t, b.Evaluate(ctx(t), r)); !d.Allowed {
				t.Fatalf("first request of %s under %s denied", r.Subject, r.Policies.Policy(0).Name)
			}
		}
		if d := evaluated(t, b.Evaluate(ctx(t), limiter.Request{Policies: One(p), Subject: alice, Cost: 1})); d.Allowed {
			t.Fatal("second request allowed over a limit of one")
		}
	})
	t.Run("a new policy revision starts a fresh budget", func(t *testing.T) {
		b := newBackend(t, NewClock())
		p := FixedWindow(1, time.Minute)
		s := Subject()
		evaluated(t, b.Evaluate(ctx(t), limiter.Request{Policies: One(p), Subject: s, Cost: 1}))
		if d := evaluated(t, b.Evaluate(ctx(t), limiter.Request{Policies: One(p), Subject: s, Cost: 1})); d.Allowed {
			t.Fatal("allowed over the limit")
		}
		next := *p
		next.Revision++
		if d := evaluated(t, b.Evaluate(ctx(t), limiter.Request{Policies: One(&next), Subject: s, Cost: 1})); !d.Allowed {
			t.Fatal("revision 2 inherited revision 1's count")
		}
	})
	t.Run("requests the policy cannot take are incompatible", func(t *testing.T) {
		b := newBackend(t, NewClock())
		p := FixedWindow(5, time.Minute)
		p.MaxCost = 2
		for name, tc := range map[string]struct {
			req  limiter.Request
			want limiter.IncompatibleReason
		}{
			"no policy":      {limiter.Request{Subject: Subject(), Cost: 1}, limiter.UnknownPolicy},
			"cost above max": {limiter.Request{Policies: One(p), Subject: Subject(), Cost: 3}, limiter.CostOutOfRange},
			"cost of zero":   {limiter.Request{Policies: One(p), Subject: Subject(), Cost: 0}, limiter.CostOutOfRange},
			"negative cost":  {limiter.Request{Policies: One(p), Subject: Subject(), Cost: -1}, limiter.CostOutOfRange},
		} {
			o, ok := b.Evaluate(ctx(t), tc.req).(limiter.Incompatible)
			if !ok || o.Reason != tc.want {
				t.Errorf("%s: got %#v, want Incompatible(%v)", name, o, tc.want)
			}
		}
	})
	t.Run("a spent deadline is rejected before any work", func(t *testing.T) {
		b := newBackend(t, NewClock())
		p := FixedWindow(1, time.Minute)
		s := Subject()
		c, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
		defer cancel()
		o, ok := b.Evaluate(c, limiter.Request{Policies: One(p), Subject: s, Cost: 1}).(limiter.Unavailable)
		if !ok || o.Category != limiter.AdmissionRejected {
			t.Fatalf("got %#v, want Unavailable(admission_rejected)", o)
		}
		if d := evaluated(t, b.Evaluate(ctx(t), limiter.Request{Policies: One(p), Subject: s, Cost: 1})); !d.Allowed {
			t.Fatal("the rejected request was charged")
		}
	})
	t.Run("clock regression within the bound is absorbed, beyond it is unsafe", func(t *testing.T) {
		for _, p := range []*limiter.Policy{FixedWindow(10, time.Second), SlidingCounter(10, time.Second), TokenBucket(10, 1, time.Second)} {
			clock := NewClock()
			b := newBackend(t, clock)
			s := Subject()
			req := limiter.Request{Policies: One(p), Subject: s, Cost: 1}
			evaluated(t, b.Evaluate(ctx(t), req))
			clock.Advance(-p.MaxClockRegression)
			if d := evaluated(t, b.Evaluate(ctx(t), req)); !d.Allowed || d.Remaining != 8 {
				t.Fatalf("%s: within the bound got %+v, want allowed with 8 left", p.Algorithm, d)
			}
			clock.Advance(-time.Millisecond)
			o, ok := b.Evaluate(ctx(t), req).(limiter.Unavailable)
			if !ok || o.Category != limiter.ClockUnsafe {
				t.Fatalf("%s: beyond the bound got %#v, want Unavailable(clock_unsafe)", p.Algorithm, o)
			}
			clock.Advance(p.MaxClockRegression + time.Millisecond)
			if d := evaluated(t, b.Evaluate(ctx(t), req)); !d.Allowed || d.Remaining != 7 {
				t.Fatalf("%s: after the clock caught up got %+v, want allowed with 7 left", p.Algorithm, d)
			}
		}
	})
	t.Run("a retried evaluation returns its first result and is charged once", func(t *testing.T) {
		for _, p := range []*limiter.Policy{FixedWindow(3, time.Minute), SlidingCounter(3, time.Minute), TokenBucket(3, 1, time.Minute)} {
			clock := NewClock()
			b := newBackend(t, clock)
			s := Subject()
			// The first is new, as the gateway's are: remembered all the
			// same; the retry is not.
			first := evaluated(t, b.Evaluate(ctx(t), limiter.Request{Policies: One(p), Subject: s, Cost: 1, EvaluationID: "eval-1", NewID: true}))
			clock.Advance(time.Second)
			again := evaluated(t, b.Evaluate(ctx(t), limiter.Request{Policies: One(p), Subject: s, Cost: 1, EvaluationID: "eval-1"}))
			if again != first {
				t.Fatalf("%s: retry got %+v, first was %+v", p.Algorithm, again, first)
			}
			next := evaluated(t, b.Evaluate(ctx(t), limiter.Request{Policies: One(p), Subject: s, Cost: 1, EvaluationID: "eval-2", NewID: true}))
			if next.Remaining != 1 {
				t.Fatalf("%s: after a retry %d left, want 1", p.Algorithm, next.Remaining)
			}
			// Past the dedup TTL the ID is forgotten and charges again.
			clock.Advance(p.Dedup.TTL)
			late := evaluated(t, b.Evaluate(ctx(t), limiter.Request{Policies: One(p), Subject: s, Cost: 1, EvaluationID: "eval-1"}))
			if late.Remaining != 0 || !late.Allowed {
				t.Fatalf("%s: a forgotten ID got %+v, want charged with 0 left", p.Algorithm, late)
			}
		}
	})
	t.Run("without dedup a repeated evaluation ID is charged each time", func(t *testing.T) {
		p := FixedWindow(3, time.Minute)
		p.Dedup = limiter.Dedup{}
		b := newBackend(t, NewClock())
		s := Subject()
		evaluated(t, b.Evaluate(ctx(t), limiter.Request{Policies: One(p), Subject: s, Cost: 1, EvaluationID: "same"}))
		if d := evaluated(t, b.Evaluate(ctx(t), limiter.Request{Policies: One(p), Subject: s, Cost: 1, EvaluationID: "same"})); d.Remaining != 1 {
			t.Fatalf("remaining %d, want 1", d.Remaining)
		}
	})
	t.Run("dedup memory is bounded by max_entries", func(t *testing.T) {
		p := FixedWindow(100, time.Minute)
		p.Dedup.MaxEntries = 2
		b := newBackend(t, NewClock())
		s := Subject()
		for _, id := range []string{"a", "b", "c"} {
			evaluated(t, b.Evaluate(ctx(t), limiter.Request{Policies: One(p), Subject: s, Cost: 1, EvaluationID: id}))
		}
		// "a" fell out of the two remembered IDs, so it is charged again;
		// "c" is still remembered.
		if d := evaluated(t, b.Evaluate(ctx(t), limiter.Request{Policies: One(p), Subject: s, Cost: 1, EvaluationID: "a"})); d.Remaining != 96 {
			t.Fatalf("forgotten ID: remaining %d, want 96", d.Remaining)
		}
		if d := evaluated(t, b.Evaluate(ctx(t), limiter.Request{Policies: One(p), Subject: s, Cost: 1, EvaluationID: "a"})); d.Remaining != 96 {
			t.Fatalf("remembered ID: remaining %d, want 96", d.Remaining)
		}
	})
	t.Run("concurrent requests admit exactly the limit", func(t *testing.T) {
		for _, p := range []*limiter.Policy{FixedWindow(5, time.Minute), SlidingCounter(5, time.Minute), TokenBucket(5, 1, time.Minute)} {
			b := newBackend(t, NewClock())
			s := Subject()
			var allowed atomic.Int64
			var wg sync.WaitGroup
			for i := 0; i < 40; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					o := b.Evaluate(ctx(t), limiter.Request{Policies: One(p), Subject: s, Cost: 1, EvaluationID: Subject()})
					if e, ok := o.(limiter.Evaluated); ok && e.Allowed {
						allowed.Add(1)
					}
				}()
			}
			wg.Wait()
			if n := allowed.Load(); n != 5 {
				t.Fatalf("%s: %d of 40 allowed, want 5", p.Algorithm, n)
			}
		}
	})
	runSeveral(t, newBackend)
	runConcurrency(t, newBackend)
	runResponseCharged(t, newBackend)
	runReserve(t, newBackend)
	runCalendar(t, newBackend)
	runDelay(t, newBackend)
	runOverrides(t, newBackend)
	runPenalties(t, newBackend)
}

func sequence(t *testing.T, newBackend Factory, p *limiter.Policy, steps []want) {
	t.Helper()
	clock := NewClock()
	b := newBackend(t, clock)
	s := Subject()
	for i, w := range steps {
		clock.Advance(w.advance)
		d := evaluated(t, b.Evaluate(ctx(t), limiter.Request{Policies: One(p), Subject: s, Cost: w.cost, EvaluationID: Subject(), Phase: w.phase}))
		got := want{advance: w.advance, phase: w.phase, cost: w.cost, allowed: d.Allowed, remaining: d.Remaining, retry: d.RetryAfter, reset: d.ResetAfter}
		if got != w {
			t.Fatalf("step %d: got %+v\n        want %+v", i, got, w)
		}
		if d.Limit != p.Quota() {
			t.Fatalf("step %d: limit %d, want %d", i, d.Limit, p.Quota())
		}
	}
}

func evaluated(t *testing.T, o limiter.Outcome) limiter.Decision {
	t.Helper()
	e, ok := o.(limiter.Evaluated)
	if !ok {
		t.Fatalf("outcome %#v, want Evaluated", o)
	}
	return e.Decision
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), limiter.DefaultDeadline)
	t.Cleanup(cancel)
	return c
}
