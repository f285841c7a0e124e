package limiter

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"time"
)

// Leases of budget (Policy.Lease), on Redis. For a request whose every
// policy has a lease, this instance keeps per policy list and subject a
// lease per policy: units charged on Redis ahead of the requests they
// admit. A request takes its cost from every lease or from none, under
// one lock. When any lease is short, one script call decides the request
// as usual over all its policies: a short lease's policy is charged the
// cost plus up to Lease - cost more units (fewer when less is left), which
// become the lease; a policy whose lease still holds the cost is covered
// by it (charged nothing on Redis; lua.ChargeCovered) and its units are
// reserved for the call, given back to the lease when the request is
// refused. While that call is in flight, the set's other requests wait for
// it rather than send their own: a hot subject costs about one call per
// Lease requests.
//
// What bounds a lease: it is void from the end of the policy's period as
// the call that took it saw it: a fixed window's end, or a token bucket's
// next refill (a bucket gains tokens only at whole refill periods, so
// between two refills it counts like a window: a token spent later in the
// same period is one the bucket would have admitted when it was taken).
// Hence no period admits more than its limit, whatever the number of
// instances; each instance holds at most Lease - 1 units unused after a
// request's call (the request spends its cost from it), and Lease/2 +
// Lease after a fetch ahead (redis_lease_ahead.go), which is what another
// instance may be refused early. A lease's unused units go back
// to Redis (lua.ChargeReturned) once its set has been idle for
// budgetIdle, to the state the lease was taken from: a window's units go
// back to their window only (the script finds the window's start in the
// state, or nothing to give back to), a bucket's tokens up to its
// capacity (tokens given back later than taken add no more than the
// refills would have).
type budgetLeases struct {
	seed     maphash.Seed
	perShard int
	shards   [budgetShards]budgetShard
	stop     chan struct{}
	done     chan struct{}
	// giving runs the give-backs in flight; at most maxGiving at once.
	giving sync.WaitGroup
	slots  chan struct{}
	// closing: Close has begun; no fetch ahead starts (giving is waited
	// for). Under closeMu.
	closeMu sync.Mutex
	closing bool
}

const (
	budgetShards = 16
	// budgetIdle is how long a set goes untouched before its units go
	// back; budgetSweep how often sets are looked at for it.
	budgetIdle  = time.Second
	budgetSweep = budgetIdle / 4
	// maxBudgetSets bounds the sets held: a subject that finds its shard
	// full is decided on Redis alone, exactly, until idle sets go.
	maxBudgetSets = 1 << 16
	maxGiving     = 64
)

type budgetShard struct {
	mu sync.Mutex
	m  map[denialKey]*budgetSet // by policy list and subject, cost 0
}

// budgetSet is the leases of one policy list and subject, one per policy.
type budgetSet struct {
	mu      sync.Mutex
	set     *PolicySet
	ps      []*Policy // set's
	subject string
	leases  []budgetLease
	// used is when a request last took from the set, by the first
	// policy's clock.
	used time.Time
	// calling: a call for the set is in flight. The set's requests that
	// arrive meanwhile and cannot be admitted locally wait in line for it
	// (waiting, first come first served; only while calling).
	calling bool
	waiting []*budgetWaiter
	// expiry refuses, at its deadline, a waiter still in line: one timer
	// per set, armed at the earliest deadline in line (expires; zero when
	// not armed), in place of a timer per waiter.
	expiry  *time.Timer
	expires time.Time
	// gone: dropped from its shard, its units given back; a caller
	// holding it looks the set up again.
	gone bool
}

// budgetWaiter is a request waiting in line for a set's call to end.
// When it does, the request is admitted from the new leases, or, first in
// line and short of them, sends the next call: its outcome is sent on
// turn, nil for the call; its deadline passed first, Unavailable. served:
// no longer in line. Waiters are reused (budgetWaiters): one leaves the
// line with turn empty and nobody holding it.
type budgetWaiter struct {
	cost     int64
	deadline time.Time // zero: none
	turn     chan Outcome
	served   bool
}

var budgetWaiters = sync.Pool{New: func() any { return &budgetWaiter{turn: make(chan Outcome, 1)} }}

// budgetLease is one policy's lease.
type budgetLease struct {
	units  int64 // left to admit from
	beyond int64 // what Redis had left beyond the lease when it was taken
	// until is when the lease is void, by the policy's clock as this
	// instance reads it; resetAt is the decision's reset. start is the
	// state's start the lease was charged to, which a give-back names.
	until, resetAt time.Time
	start          int64
	// dry: a call that fetched ahead found nothing left on Redis for
	// the lease; none is fetched ahead again until a new lease is taken.
	dry bool
}

func newBudgetLeases() *budgetLeases {
	b := &budgetLeases{seed: maphash.MakeSeed(), perShard: maxBudgetSets / budgetShards,
		stop: make(chan struct{}), done: make(chan struct{}), slots: make(chan struct{}, maxGiving)}
	for i := range b.shards {
		b.shards[i].m = make(map[denialKey]*budgetSet)
	}
	return b
}

// set is the set of ps and subject, made on first use; nil when its shard
// is full.
func (b *budgetLeases) set(set *PolicySet, subject string) *budgetSet {
	k := denialKey{set: set, subject: subject}
	sh := &b.shards[maphash.String(b.seed, subject)%budgetShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	s := sh.m[k]
	if s == nil {
		if len(sh.m) >= b.perShard {
			return nil
		}
		s = &budgetSet{set: set, ps: set.list, subject: subject, leases: make([]budgetLease, set.Len())}
		sh.m[k] = s
	}
	return s
}

// forget drops the sets of subject, their units with them: the subject
// was reset, and starts afresh on Redis.
func (b *budgetLeases) forget(subject string) {
	sh := &b.shards[maphash.String(b.seed, subject)%budgetShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for k, s := range sh.m {
		if k.subject == subject {
			s.mu.Lock()
			s.gone = true
			clear(s.leases)
			s.mu.Unlock()
			delete(sh.m, k)
		}
	}
}

// budgetCall is what one script call of a set asks and gets.
type budgetCall struct {
	// asks is, per policy, the units asked beyond the cost, or
	// budgetCovered.
	asks   []int64
	sent   []time.Time // each policy's clock before the call
	starts []int64     // each policy's state start after the call
}

const budgetCovered = -1

// evaluateLeased decides req, whose every policy has a lease, from its
// leases when they hold its cost, and otherwise by one script call that
// takes new ones. While a call is in flight, the set's other requests
// wait in line; when it ends, the line is admitted from the new leases in
// its order, and the first the leases cannot admit sends the next call:
// a call wakes only those it serves, and no request is passed over.
func (r *Redis) evaluateLeased(ctx context.Context, req Request) Outcome {
	var s *budgetSet
	for s == nil {
		if s = r.budget.set(req.Policies, req.Subject); s == nil {
			return r.evaluate(ctx, req, nil)
		}
		s.mu.Lock()
		if s.gone {
			s.mu.Unlock()
			s = nil
			continue
		}
		if len(s.waiting) == 0 {
			if e, ok := s.take(r, req.Cost); ok {
				ahead := s.planAhead(r)
				s.mu.Unlock()
				r.m.budgetAdmitted.Inc()
				if ahead != nil {
					r.fetchAhead(s, ahead)
				}
				return e
			}
		}
		if s.calling {
			w := budgetWaiters.Get().(*budgetWaiter)
			w.cost, w.deadline, w.served = req.Cost, req.Deadline, false
			s.waiting = append(s.waiting, w)
			s.expireBy(req.Deadline)
			s.mu.Unlock()
			o, ok := s.await(ctx, r, w)
			budgetWaiters.Put(w)
			if ok {
				return o // admitted from the leases, or out of time
			}
			// Its turn to call.
			s.mu.Lock()
			if s.gone {
				s.calling = false
				s.handOff(r)
				s.mu.Unlock()
				s = nil
				continue
			}
		}
	}
	s.calling = true
	call := s.plan(r, req.Cost)
	s.mu.Unlock()
	o := r.evaluate(ctx, req, call)
	s.mu.Lock()
	o = s.settle(r, req.Cost, call, o)
	s.calling = false
	s.handOff(r)
	s.mu.Unlock()
	return o
}

// handOff admits the line from the set's leases, in order, until one
// cannot be: that one is given the turn to call (and the set is calling
// again).
func (s *budgetSet) handOff(r *Redis) {
	for len(s.waiting) > 0 {
		w := s.waiting[0]
		s.waiting[0] = nil
		s.waiting = s.waiting[1:]
		w.served = true
		if e, ok := s.take(r, w.cost); ok && !s.gone {
			r.m.budgetAdmitted.Inc()
			w.turn <- e
			continue
		}
		s.calling = true
		w.turn <- nil
		return
	}
	s.waiting = nil
}

// await waits for w's turn: its outcome (true), or nil and false when it
// is to call. A caller whose deadline passes first leaves the line,
// Unavailable (nothing was charged; see expire), unless its turn came
// meanwhile; so does one whose context ends.
func (s *budgetSet) await(ctx context.Context, r *Redis, w *budgetWaiter) (Outcome, bool) {
	select {
	case o := <-w.turn:
		return o, o != nil
	case <-ctx.Done():
	}
	err := ctx.Err()
	s.mu.Lock()
	if w.served {
		s.mu.Unlock()
		if o := <-w.turn; o != nil {
			return o, true
		}
		// Its turn to call, which it no longer can: the next in line calls.
		s.mu.Lock()
		s.calling = false
		s.handOff(r)
		s.mu.Unlock()
		return Unavailable{Category: AdmissionRejected, Err: err}, true
	}
	s.waiting = slices.DeleteFunc(s.waiting, func(x *budgetWaiter) bool { return x == w })
	s.mu.Unlock()
	return Unavailable{Category: AdmissionRejected, Err: err}, true
}

// expireBy arms the set's expiry for deadline, unless it is zero or the
// expiry is armed for as early. Under s.mu.
func (s *budgetSet) expireBy(deadline time.Time) {
	if deadline.IsZero() || !s.expires.IsZero() && !deadline.Before(s.expires) {
		return
	}
	s.expires = deadline
	if s.expiry == nil {
		s.expiry = time.AfterFunc(time.Until(deadline), s.expire)
		return
	}
	s.expiry.Reset(time.Until(deadline))
}

// expire refuses the waiters in line whose deadline has passed,
// Unavailable, and arms the expiry for the earliest deadline left. It runs
// on the expiry; a waiter given its turn meanwhile keeps it.
func (s *budgetSet) expire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.expires = time.Time{}
	var next time.Time
	s.waiting = slices.DeleteFunc(s.waiting, func(w *budgetWaiter) bool {
		switch {
		case w.deadline.IsZero():
			return false
		case !now.Before(w.deadline):
			w.served = true
			w.turn <- Unavailable{Category: AdmissionRejected, Err: context.DeadlineExceeded}
			return true
		case next.IsZero() || w.deadline.Before(next):
			next = w.deadline
		}
		return false
	})
	if !next.IsZero() {
		s.expires = next
		s.expiry.Reset(next.Sub(now))
	}
}

// take admits a request of cost from the set's leases when every one of
// them holds it, and takes it from each; otherwise it takes nothing.
func (s *budgetSet) take(r *Redis, cost int64) (Evaluated, bool) {
	var nowOn [scratchPolicies]time.Time
	now := nowOn[:0]
	for i, p := range s.ps {
		now = append(now, r.now(p))
		if l := &s.leases[i]; l.units < cost || !now[i].Before(l.until) {
			return Evaluated{}, false
		}
	}
	var eachOn [scratchPolicies]Decision
	each := eachOn[:0]
	for i, p := range s.ps {
		l := &s.leases[i]
		l.units -= cost
		each = append(each, p.decision(true, l.beyond+l.units, max(l.resetAt.Sub(now[i]), 0), 0, now[i].UnixMilli()))
	}
	s.used = now[0]
	return evaluated(s.ps, each), true
}

// plan is the call for a request of cost the leases could not admit: the
// leases that hold the cost cover it (and lend it to the call), the others
// ask for a new lease.
func (s *budgetSet) plan(r *Redis, cost int64) *budgetCall {
	n := len(s.ps)
	call := &budgetCall{asks: make([]int64, n), sent: make([]time.Time, n), starts: make([]int64, n)}
	for i, p := range s.ps {
		l := &s.leases[i]
		call.sent[i] = r.now(p)
		if !call.sent[i].Before(l.until) {
			*l = budgetLease{} // its period is over, and its units with it
		}
		if l.units >= cost {
			l.units -= cost
			call.asks[i] = budgetCovered
			continue
		}
		// The units left, fewer than the cost, stay: with the new ones the
		// lease holds at most Lease - cost.
		call.asks[i] = max(p.Lease-cost-l.units, 0)
	}
	return call
}

// settle takes the call's outcome into the set: an admitted request's new
// leases, or a refused one's covered costs given back to their leases.
// A covered policy's decision says what Redis had left and the lease holds.
func (s *budgetSet) settle(r *Redis, cost int64, call *budgetCall, o Outcome) Outcome {
	e, ok := o.(Evaluated)
	var eachOn [scratchPolicies]Decision
	each := eachOn[:0]
	if ok {
		for i := range s.ps {
			each = append(each, e.PolicyDecision(i))
		}
	}
	in := ok && admitted(s.ps, each)
	covered := false
	for i, p := range s.ps {
		l := &s.leases[i]
		ask := call.asks[i]
		switch {
		case ask == budgetCovered && !in:
			l.units += cost
		case ask == budgetCovered:
			covered = true
			each[i].Remaining += l.units
		case in && each[i].Allowed && each[i].Delay() == 0 && call.starts[i] != 0:
			units := min(ask, max(each[i].Remaining, 0))
			if units == 0 {
				continue
			}
			life := p.Algorithm.spec().leaseLife(p, each[i])
			until := call.sent[i].Add(life - time.Millisecond)
			switch {
			case !r.now(p).Before(l.until):
				l.units = 0 // the lease before ended meanwhile
			case l.units > 0:
				// What was left of the lease before ends as early as it did.
				until = minTime(until, l.until)
			}
			*l = budgetLease{units: l.units + units, beyond: each[i].Remaining - units,
				until: until, resetAt: call.sent[i].Add(each[i].ResetAfter), start: call.starts[i]}
			r.m.budgetTaken.Inc()
		}
	}
	if in {
		s.used = call.sent[0]
	}
	if covered {
		return evaluated(s.ps, each)
	}
	return o
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// leaseReturn is one lease's unused units, to go back to Redis.
type leaseReturn struct {
	set     *PolicySet // the lease's policy alone
	subject string
	units   int64
	start   int64
}

// sweepBudget drops the sets idle for at least idle and gives their live
// leases' units back, in the background, each call within ctx and
// leaseCallTimeout; with idle 0, every set.
func (r *Redis) sweepBudget(ctx context.Context, idle time.Duration) {
	b := r.budget
	var back []leaseReturn
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		for k, s := range sh.m {
			s.mu.Lock()
			if !s.calling && r.now(s.ps[0]).Sub(s.used) >= idle {
				s.gone = true
				delete(sh.m, k)
				for j, p := range s.ps {
					if l := s.leases[j]; l.units > 0 && r.now(p).Before(l.until) {
						back = append(back, leaseReturn{set: s.set.alone(j), subject: s.subject, units: l.units, start: l.start})
					}
				}
			}
			s.mu.Unlock()
		}
		sh.mu.Unlock()
	}
	for _, g := range back {
		b.slots <- struct{}{}
		b.giving.Add(1)
		go func() {
			defer func() { <-b.slots; b.giving.Done() }()
			r.returnLease(ctx, g)
		}()
	}
}

// returnLease gives a lease's unused units back to Redis: the script
// takes them off the state the lease was charged to, when it still is
// that state (lua.ChargeReturned).
func (r *Redis) returnLease(ctx context.Context, g leaseReturn) {
	cmd := r.command(g.set, g.subject, scriptCall{cost: g.units, phase: returningLease, leaseStart: g.start})
	ctx, cancel := context.WithTimeout(ctx, leaseCallTimeout)
	defer cancel()
	if _, err := r.evalsha(ctx, cmd); err == nil {
		r.m.budgetReturned.Add(float64(g.units))
	}
}

// sweepBudgetLeases gives idle leases back until Close, which gives back
// the rest, all within one leaseCallTimeout: a Redis that does not answer
// holds a shutdown no longer.
func (r *Redis) sweepBudgetLeases() {
	defer close(r.budget.done)
	t := time.NewTicker(budgetSweep)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			r.sweepBudget(context.Background(), budgetIdle)
		case <-r.budget.stop:
			r.budget.closeMu.Lock()
			r.budget.closing = true
			r.budget.closeMu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), leaseCallTimeout)
			r.sweepBudget(ctx, 0)
			r.budget.giving.Wait()
			cancel()
			return
		}
	}
}
