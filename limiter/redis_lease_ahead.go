package limiter

import (
	"context"
	"time"
)

// Leases of budget fetched ahead. When a request taken from a set's
// leases leaves one of them at half its policy's Lease or less, and no
// call of the set is in flight, the next lease is taken in the
// background: a call as for a request of cost 1 that asks every low
// lease's policy for Lease units (its own unit included), the others
// covering the unit from their leases. The set's requests go on being
// admitted from what is left meanwhile, so a hot subject's requests wait
// on Redis only when it is slower than half a lease of them. The units
// the call charges join the leases as a request's call's do; the unit of
// the request that is not there goes back to the covering leases, and
// joins the new ones. So a lease holds at most Lease/2 + Lease units,
// never more than Redis charged, and void at the same period's end: no
// period admits more than its limit, and an instance may leave another
// refused early by at most Lease/2 + Lease units. A call that finds nothing
// left marks the lease dry: none is fetched ahead of it again.

// planAhead is the call that fetches the set's low leases ahead, or nil:
// none is low, one is dry or void, or a call is in flight. It marks the
// set calling. Under s.mu.
func (s *budgetSet) planAhead(r *Redis) *budgetCall {
	if s.calling || s.gone {
		return nil
	}
	low := false
	for i, p := range s.ps {
		l := &s.leases[i]
		if l.dry || !r.now(p).Before(l.until) {
			return nil
		}
		low = low || 2*l.units <= p.Lease
	}
	if !low {
		return nil
	}
	n := len(s.ps)
	call := &budgetCall{asks: make([]int64, n), sent: make([]time.Time, n), starts: make([]int64, n)}
	for i, p := range s.ps {
		l := &s.leases[i]
		call.sent[i] = r.now(p)
		if 2*l.units > p.Lease {
			l.units--
			call.asks[i] = budgetCovered
			continue
		}
		call.asks[i] = p.Lease - 1
	}
	s.calling = true
	return call
}

// fetchAhead sends call in the background, within the limiter's deadline,
// and takes what it brings into the set; without a free place among the
// background calls (maxGiving), or once Close has begun, it gives the
// covered units back and sends nothing.
func (r *Redis) fetchAhead(s *budgetSet, call *budgetCall) {
	b := r.budget
	if !b.startGiving() {
		s.mu.Lock()
		s.settleAhead(r, call, nil)
		s.mu.Unlock()
		return
	}
	go func() {
		defer func() { <-b.slots; b.giving.Done() }()
		start := time.Now()
		req := Request{Policies: s.set, Subject: s.subject, Cost: 1, Phase: Admission, Start: start, Deadline: start.Add(DefaultDeadline)}
		o := r.evaluate(context.Background(), req, call)
		s.mu.Lock()
		s.settleAhead(r, call, o)
		s.mu.Unlock()
	}()
}

// settleAhead takes a fetch ahead's outcome (nil: not sent) into the set:
// the new units, and the absent request's unit back where it was taken;
// a lease the call found nothing left for is marked dry. The set calls no
// more, and its line is served. Under s.mu.
func (s *budgetSet) settleAhead(r *Redis, call *budgetCall, o Outcome) {
	e, decided := o.(Evaluated)
	if decided {
		// A refused call's covered units go back to their leases here.
		s.settle(r, 1, call, o)
	}
	for i := range s.ps {
		l := &s.leases[i]
		covered := call.asks[i] == budgetCovered
		switch {
		case covered && (!decided || e.Allowed):
			// The unit the absent request took from the lease.
			l.units++
		case covered:
			// A refused call's: settle gave it back.
		case decided && e.Allowed && e.PolicyDecision(i).Allowed:
			// The unit charged on Redis for the absent request.
			l.units++
			// Nothing left on Redis beyond the lease: none to fetch.
			l.dry = l.beyond <= 0
		case decided:
			l.dry = true
		}
	}
	s.calling = false
	s.handOff(r)
}

// startGiving takes a place among the background calls, unless none is
// free or Close has begun.
func (b *budgetLeases) startGiving() bool {
	b.closeMu.Lock()
	defer b.closeMu.Unlock()
	if b.closing {
		return false
	}
	select {
	case b.slots <- struct{}{}:
		b.giving.Add(1)
		return true
	default:
		return false
	}
}
