package limiter

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"
)

// down is a shared backend that never decides: the outage the fallback is
// for, standing in for a Redis this test does not need.
type down struct{}

func (down) Evaluate(context.Context, Request) Outcome {
	return Unavailable{Category: AdmissionRejected, Err: errors.New("down")}
}
func (down) StandingDenial(Request) (Evaluated, bool)  { return Evaluated{}, false }
func (down) Release(Request, Evaluated)                {}
func (down) GiveBack(Request, Evaluated)               {}
func (down) Renew(context.Context, Request, Evaluated) {}
func (down) Ready(context.Context) error               { return errors.New("down") }
func (down) Close() error                              { return nil }
func (down) Peek(context.Context, Request) Outcome {
	return Unavailable{Category: AdmissionRejected, Err: errors.New("down")}
}
func (down) Reset(context.Context, Request) error { return errors.New("down") }
func (down) Overrides() Overrides                 { return nil }
func (down) Penalties() Penalties                 { return nil }

// Every reload brings new policy values; the fallback's scaled copies of
// them stay bounded, and a budget outlives the copies being made again.
func TestFallbackScaledPoliciesStayBoundedAcrossReloads(t *testing.T) {
	f := newFallback(down{}, FallbackOptions{Instances: 2}, nil)
	defer f.Close()
	allowed := 0
	for reload := range 3 * maxScaled {
		p := &Policy{Name: "per-minute", Revision: 1, Algorithm: FixedWindow, Limit: 4, Window: time.Hour, MaxCost: 4,
			CleanupGrace: DefaultCleanupGrace, MaxClockRegression: DefaultMaxClockRegression, Clock: ClockGateway}
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		o := f.Evaluate(context.Background(), Request{Policies: MustPolicySet(p), Subject: "s", Cost: 1})
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

// While the shared backend cannot decide, a concurrency limit is divided
// like any budget (ceil(5/2) = 3 leases on this instance), and a lease
// taken by the fallback is given back to it.
func TestFallbackDividesAConcurrencyLimitAndReleasesLocally(t *testing.T) {
	f := newFallback(down{}, FallbackOptions{Instances: 2}, nil)
	defer f.Close()
	p := &Policy{Name: "in-flight", Revision: 1, Algorithm: Concurrency, Limit: 5, LeaseTTL: time.Minute, MaxCost: 1,
		CleanupGrace: DefaultCleanupGrace, MaxClockRegression: DefaultMaxClockRegression, Dedup: DefaultDedup}
	ps := MustPolicySet(p)
	acquire := func(i int) Evaluated {
		req := Request{Policies: ps, Subject: "s", Cost: 1, EvaluationID: "e" + strconv.Itoa(i)}
		e, ok := f.Evaluate(context.Background(), req).(Evaluated)
		if !ok || !e.Fallback {
			t.Fatalf("request %d: not a fallback decision", i)
		}
		return e
	}
	var firstE Evaluated
	for i := range 4 {
		e := acquire(i)
		if e.Allowed != (i < 3) {
			t.Fatalf("request %d: allowed %v, want the first 3 of ceil(5/2)", i, e.Allowed)
		}
		if i == 0 {
			firstE = e
		}
	}
	firstE.Admitted().Release()
	if e := acquire(9); !e.Allowed {
		t.Fatal("a lease released to the fallback did not free a slot")
	}
}

// A response-charged policy's reserve taken by the fallback, from the
// divided budget, is settled there: a settlement below the reserve gives
// the difference back to this instance's budget, never to the shared
// backend, which is still down.
func TestFallbackSettlesLocallyWhatItAdmittedLocally(t *testing.T) {
	f := newFallback(down{}, FallbackOptions{Instances: 2}, nil)
	defer f.Close()
	p := NewPolicy("usage", FixedWindow)
	p.Limit, p.Window, p.CostHeader, p.MaxCost, p.Reserve = 100, time.Hour, "X-Usage-Cost", 60, 40
	ps := MustPolicySet(p)
	admit := func(i int) Evaluated {
		req := Request{Policies: ps, Subject: "s", Cost: 1, EvaluationID: "e" + strconv.Itoa(i), NewID: true}
		e, ok := f.Evaluate(context.Background(), req).(Evaluated)
		if !ok || !e.Fallback {
			t.Fatalf("request %d: not a fallback decision", i)
		}
		return e
	}
	// ceil(100/2) = 50 on this instance: one reserve of 40 fits, not two.
	first := admit(1)
	if !first.Allowed || first.Remaining != 10 {
		t.Fatalf("first: allowed %v, %d left; want allowed with 10", first.Allowed, first.Remaining)
	}
	if admit(2).Allowed {
		t.Fatal("a second reserve of 40 admitted on 10 left")
	}
	req := first.Admitted().Settlement(0, 5)
	req.EvaluationID, req.NewID = "s1", true
	if o, ok := f.Evaluate(context.Background(), req).(Evaluated); !ok {
		t.Fatalf("settlement: %#v, want it decided by the fallback", o)
	}
	if e := admit(3); !e.Allowed || e.Remaining != 5 {
		t.Fatalf("after a cost of 5 settled: allowed %v, %d left; want allowed with 45 - 40 = 5", e.Allowed, e.Remaining)
	}
}
