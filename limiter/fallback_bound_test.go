package limiter

import (
	"context"
	"errors"
	"testing"
	"time"
)

// down is a shared backend that never decides: the outage the fallback is
// for, standing in for a Redis this test does not need.
type down struct{}

func (down) Evaluate(context.Context, Request) Outcome {
	return Unavailable{Category: AdmissionRejected, Err: errors.New("down")}
}
func (down) StandingDenial(Request) (Evaluated, bool) { return Evaluated{}, false }
func (down) Ready(context.Context) error              { return errors.New("down") }
func (down) Close() error                             { return nil }

// Every reload brings new policy values; the fallback's scaled copies of
// them stay bounded, and a budget outlives the copies being made again.
func TestFallbackScaledPoliciesStayBoundedAcrossReloads(t *testing.T) {
	f := newFallback(down{}, FallbackOptions{Instances: 2})
	defer f.Close()
	allowed := 0
	for reload := range 3 * maxScaled {
		p := &Policy{Name: "per-minute", Revision: 1, Algorithm: FixedWindow, Limit: 4, Window: time.Hour, MaxCost: 4,
			CleanupGrace: DefaultCleanupGrace, MaxClockRegression: DefaultMaxClockRegression, Clock: ClockGateway}
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		o := f.Evaluate(context.Background(), Request{Policies: []*Policy{p}, Subject: "s", Cost: 1})
		e, ok := o.(Evaluated)
		if !ok || !e.Fallback {
			t.Fatalf("reload %d: %#v, want a fallback decision", reload, o)
		}
		if e.Allowed {
			allowed++
		}
		if n := len(f.scaled); n > maxScaled {
			t.Fatalf("reload %d: %d scaled policies held, want at most %d", reload, n, maxScaled)
		}
	}
	// ceil(4/2) = 2 a window; a window of an hour may start once in the run.
	if allowed < 2 || allowed > 4 {
		t.Fatalf("%d admitted, want ceil(4/2) = 2 (4 if the hour turned)", allowed)
	}
}
