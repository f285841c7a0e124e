package limitertest

import (
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
)

// overridable is a backend that keeps overrides.
type overridable interface {
	Overrides() limiter.Overrides
}

// overridesOf is b's overrides; the suite's backends all keep them.
func overridesOf(t *testing.T, b Backend) limiter.Overrides {
	t.Helper()
	return as[overridable](t, b).Overrides()
}

// as is b as an I, which every backend of the suite is.
func as[I any](t *testing.T, b Backend) I {
	t.Helper()
	i, ok := b.(I)
	if !ok {
		var none *I
		t.Fatalf("%T is no %T", b, none)
	}
	return i
}

// anHourOn is an expiry an hour past both the suite's clock and the real
// one: a backend may read either.
func anHourOn(clock *Clock) time.Time {
	later := clock.Now()
	if now := time.Now(); now.After(later) {
		later = now
	}
	return later.Add(time.Hour)
}

// runOverrides holds a backend to the rules of limiter.Overrides: an
// override changes one subject's limit of one policy, at once (a standing
// denial included), and its deletion restores the policy's.
func runOverrides(t *testing.T, newBackend Factory) {
	t.Run("an override raises one subject's limit, at once, and its deletion restores the policy's", func(t *testing.T) {
		clock := NewClock()
		b := newBackend(t, clock)
		ov := overridesOf(t, b)
		p := FixedWindow(2, time.Minute)
		s, other := Subject(), Subject()
		req := limiter.Request{Policies: One(p), Subject: s, Cost: 1}
		for i := range 3 {
			if d := evaluated(t, b.Evaluate(ctx(t), req)); d.Allowed != (i < 2) {
				t.Fatalf("request %d: allowed %v before the override", i+1, d.Allowed)
			}
		}
		if _, ok := b.StandingDenial(req); !ok {
			t.Fatal("no standing denial after the limit was spent")
		}
		o := limiter.Override{Route: "r", Policy: p.Name, Pseudonym: s, SubjectKind: "principal", Limit: 5, Expires: anHourOn(clock)}
		if err := ov.Set(ctx(t), req, 0, o); err != nil {
			t.Fatal(err)
		}
		if _, ok := b.StandingDenial(req); ok {
			t.Fatal("a standing denial stood past an override that raised the limit")
		}
		for i := range 4 {
			d := evaluated(t, b.Evaluate(ctx(t), req))
			if d.Allowed != (i < 3) || d.Allowed && d.Remaining != int64(2-i) {
				t.Fatalf("request %d under the override of 5: %+v", i+3, d)
			}
		}
		if d := evaluated(t, b.Evaluate(ctx(t), limiter.Request{Policies: One(p), Subject: other, Cost: 1})); !d.Allowed || d.Remaining != 1 {
			t.Fatalf("another subject: %+v, want the policy's limit of 2", d)
		}
		list, err := ov.List(ctx(t))
		if err != nil || len(list) != 1 || list[0].Pseudonym != s || list[0].Limit != 5 || list[0].Policy != p.Name || list[0].Route != "r" {
			t.Fatalf("list %+v %v, want the one override", list, err)
		}
		if found, err := ov.Delete(ctx(t), "r", p.Name, s); !found || err != nil {
			t.Fatalf("delete: %v %v", found, err)
		}
		if found, _ := ov.Delete(ctx(t), "r", p.Name, s); found {
			t.Fatal("deleted twice")
		}
		if d := evaluated(t, b.Evaluate(ctx(t), req)); d.Allowed {
			t.Fatalf("after the delete, 5 spent of 2: %+v, want denied", d)
		}
		clock.Advance(time.Minute)
		if d := evaluated(t, b.Evaluate(ctx(t), req)); !d.Allowed || d.Remaining != 1 {
			t.Fatalf("the next window: %+v, want the policy's 2", d)
		}
	})
	t.Run("an override lowers a token bucket's capacity for one subject", func(t *testing.T) {
		clock := NewClock()
		b := newBackend(t, clock)
		p := TokenBucket(10, 1, time.Hour)
		s := Subject()
		req := limiter.Request{Policies: One(p), Subject: s, Cost: 1}
		o := limiter.Override{Route: "r", Policy: p.Name, Pseudonym: s, Limit: 3, Expires: anHourOn(clock)}
		if err := overridesOf(t, b).Set(ctx(t), req, 0, o); err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			if d := evaluated(t, b.Evaluate(ctx(t), req)); d.Allowed != (i < 3) {
				t.Fatalf("request %d under a capacity of 3: %+v", i+1, d)
			}
		}
	})
	t.Run("an override is refused below 1 or already expired", func(t *testing.T) {
		clock := NewClock()
		b := newBackend(t, clock)
		p := FixedWindow(2, time.Minute)
		req := limiter.Request{Policies: One(p), Subject: Subject(), Cost: 1}
		for _, o := range []limiter.Override{
			{Route: "r", Policy: p.Name, Pseudonym: req.Subject, Limit: 0, Expires: anHourOn(clock)},
			{Route: "r", Policy: p.Name, Pseudonym: req.Subject, Limit: 5, Expires: time.Unix(1, 0)},
		} {
			if err := overridesOf(t, b).Set(ctx(t), req, 0, o); err == nil {
				t.Errorf("override %+v taken", o)
			}
		}
	})
}
