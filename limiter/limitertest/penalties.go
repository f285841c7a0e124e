package limitertest

import (
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
)

// penalizing is a backend that keeps penalties.
type penalizing interface {
	Penalties() limiter.Penalties
}

// penaltiesOf is b's penalties; the suite's backends all keep them.
func penaltiesOf(t *testing.T, b Backend) limiter.Penalties {
	t.Helper()
	return as[penalizing](t, b).Penalties()
}

// waitFor polls cond for up to d; false when it never held.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// runPenalties holds a backend to the rules of limiter.Penalties: an
// imposed penalty is found at once on the instance that imposed it, per
// route and pseudonym, until its end and not after; a shorter one does
// not replace a longer one; a lifted one is gone.
func runPenalties(t *testing.T, newBackend Factory) {
	t.Run("a penalty is found at once on its route until its end, and lifted is gone", func(t *testing.T) {
		b := newBackend(t, NewClock())
		pens := penaltiesOf(t, b)
		s, other := Subject(), Subject()
		now := time.Now()
		p := limiter.Penalty{Route: "r", Policy: "p", Pseudonym: s, Start: now, Until: now.Add(time.Hour)}
		if err := pens.Impose(ctx(t), p); err != nil {
			t.Fatal(err)
		}
		if got, ok := pens.Find("r", s, now); !ok || got.Policy != "p" || !got.Until.Equal(p.Until) {
			t.Fatalf("find at once: %+v %v", got, ok)
		}
		if _, ok := pens.Find("other-route", s, now); ok {
			t.Fatal("found on another route")
		}
		if _, ok := pens.Find("r", other, now); ok {
			t.Fatal("found for another subject")
		}
		if _, ok := pens.Find("r", s, p.Until); ok {
			t.Fatal("found at its end")
		}
		shorter := p
		shorter.Until = now.Add(time.Minute)
		if err := pens.Impose(ctx(t), shorter); err != nil {
			t.Fatal(err)
		}
		if got, _ := pens.Find("r", s, now); !got.Until.Equal(p.Until) {
			t.Fatalf("a shorter penalty replaced a longer one: %+v", got)
		}
		listed := 0
		for _, q := range pens.List("r", now) {
			if q.Pseudonym == s {
				listed++
			}
		}
		if listed != 1 {
			t.Fatalf("listed %d times", listed)
		}
		if found, err := pens.Lift(ctx(t), "r", s); !found || err != nil {
			t.Fatalf("lift: %v %v", found, err)
		}
		if _, ok := pens.Find("r", s, now); ok {
			t.Fatal("found after the lift")
		}
		if found, _ := pens.Lift(ctx(t), "r", s); found {
			t.Fatal("lifted twice")
		}
	})
	t.Run("a penalty past its end is neither found nor listed", func(t *testing.T) {
		b := newBackend(t, NewClock())
		pens := penaltiesOf(t, b)
		s := Subject()
		now := time.Now()
		if err := pens.Impose(ctx(t), limiter.Penalty{Route: "r", Policy: "p", Pseudonym: s, Start: now, Until: now.Add(50 * time.Millisecond)}); err != nil {
			t.Fatal(err)
		}
		if !waitFor(2*time.Second, func() bool { _, ok := pens.Find("r", s, time.Now()); return !ok }) {
			t.Fatal("found past its end")
		}
		for _, p := range pens.List("r", time.Now()) {
			if p.Pseudonym == s {
				t.Fatalf("listed past its end: %+v", p)
			}
		}
	})
}

// RunPenaltiesShared holds instances that share a backend to the
// penalties' promise: one imposed or lifted on any instance is found, or
// gone, on every other within a second.
func RunPenaltiesShared(t *testing.T, newInstances Instances) {
	t.Run("penalties: imposed on one instance, found on every other within a second; lifted on another, gone everywhere", func(t *testing.T) {
		bs := newInstances(t, NewClock(), 3)
		s := Subject()
		now := time.Now()
		if err := penaltiesOf(t, bs[0]).Impose(ctx(t), limiter.Penalty{Route: "r", Policy: "p", Pseudonym: s, Start: now, Until: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		for i, b := range bs {
			pens := penaltiesOf(t, b)
			if !waitFor(time.Second-time.Since(now), func() bool { _, ok := pens.Find("r", s, time.Now()); return ok }) {
				t.Fatalf("instance %d did not find the penalty within a second", i)
			}
		}
		lifted := time.Now()
		if found, err := penaltiesOf(t, bs[len(bs)-1]).Lift(ctx(t), "r", s); !found || err != nil {
			t.Fatalf("lift: %v %v", found, err)
		}
		for i, b := range bs {
			pens := penaltiesOf(t, b)
			if !waitFor(time.Second-time.Since(lifted), func() bool { _, ok := pens.Find("r", s, time.Now()); return !ok }) {
				t.Fatalf("instance %d still finds the penalty a second after the lift", i)
			}
		}
	})
}
