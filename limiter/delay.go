package limiter

import (
	"math"
	"slices"
	"time"
)

// Delay instead of refusal (Policy.MaxDelay). A request that a policy
// would refuse but could admit within its MaxDelay is admitted at once
// with a delay: its place is taken now (the bucket goes into debt, or the
// next window's count grows), atomically with the request's other
// policies, so that every instance sharing the backend sees it. Its
// caller holds it for the delay, then forwards it; a caller whose client
// leaves first gives the place back (Admitted.GiveBack). The admission leaves a
// reservation record, by the request's evaluation ID, of where each
// policy was charged, which the give-back reads and deletes: a place is
// given back once, to the window it was taken in, and a record nobody
// reads expires shortly after the delay.

// validateMaxDelay adds the problems of MaxDelay. An algorithm that does
// not take it is the table's to refuse.
func (p *Policy) validateMaxDelay(problem func(field, summary, detail string, args ...any), millis func(string, time.Duration)) {
	if p.MaxDelay == 0 || !slices.Contains(p.Algorithm.takes(), "max_delay") {
		return
	}
	if p.MaxDelay < 0 || p.MaxDelay > MaxMaxDelay {
		problem("max_delay", "Duration out of range", "max_delay must be between 0s and %s.", MaxMaxDelay)
	} else {
		millis("max_delay", p.MaxDelay)
	}
	if p.ChargedByResponse() {
		problem("max_delay", "Argument not valid with a charge by the response", "max_delay does not apply to a policy charged by the response: nothing is charged before the response to reserve a place with.")
	}
}

// maxDelayMillis is how long a request of a caller that can hold it
// (mayDelay) may be delayed under p.
func (p *Policy) maxDelayMillis(mayDelay bool) int64 {
	if !mayDelay {
		return 0
	}
	return p.MaxDelay.Milliseconds()
}

// Held is how long the caller holds req, decided as e, before it goes on:
// the longest Delay of its enforced policies when every one of them
// allowed, else zero. A shadow policy's delay holds nothing: its request
// goes on at once, and the delay is only reported.
func Held(req Request, e Evaluated) time.Duration {
	if !req.MayDelay || req.Policies == nil {
		return 0
	}
	ps := req.Policies.list
	var each []Decision
	if e.Policies == nil {
		each = []Decision{e.Decision}
	} else {
		each = e.Policies
	}
	if len(each) != len(ps) || !admitted(ps, each) {
		return 0
	}
	return delay(ps, each)
}

// delay is the longest Delay of the enforced policies of an admitted
// request.
func delay(policies []*Policy, each []Decision) time.Duration {
	var d time.Duration
	for i, p := range policies {
		if !p.Shadow {
			d = max(d, each[i].Delay())
		}
	}
	return d
}

// givingBack is the phase of a give-back (Admitted.GiveBack): each policy of the
// request that its reservation record says was charged gets its cost
// back. It is never asked of Evaluate from outside the package.
const givingBack = Settlement + 1

// notCharged stands in a reservation record for a policy that the
// admission did not charge (a shadow policy that refused, or one charged
// by the response).
const notCharged = math.MinInt64

// giveBack is the step that gives back a charge of cost made at start
// (the reservation record's entry for p); it always allows.
func giveBack(p *Policy, st state, cost, start int64) step {
	res := step{decision: Decision{Allowed: true, Limit: p.Quota(), Certainty: p.Certainty()}}
	if start == notCharged || p.HoldsLeases() {
		return res
	}
	res.next, res.charged = p.Algorithm.spec().giveBack(p, st, cost, start)
	return res
}

// reservation is a memory backend's reservation record: where each
// policy of a delayed request was charged (its state's Start after the
// charge, or notCharged), until expiresAt.
type reservation struct {
	starts    []int64
	expiresAt int64
}

// reserve records the reservation of a request held for held, whose
// policies stepped as steps, in the shard of its first policy's key
// (whose lock is held), and returns when it is void.
func (s *memoryShard) reserve(id evaluationKey, ps []*Policy, steps []step, held time.Duration, nowMillis int64) int64 {
	starts := make([]int64, len(ps))
	for k, p := range ps {
		starts[k] = notCharged
		if steps[k].charged && !p.ChargedByResponse() {
			starts[k] = steps[k].next.Start
		}
	}
	if s.reservations == nil {
		s.reservations = make(map[evaluationKey]reservation)
	}
	r := reservation{starts: starts, expiresAt: nowMillis + held.Milliseconds() + ps[0].CleanupGrace.Milliseconds()}
	s.reservations[id] = r
	return r.expiresAt
}

// takeReservation returns and forgets the reservation recorded under id,
// if it is live.
func (s *memoryShard) takeReservation(id evaluationKey, nowMillis int64) ([]int64, bool) {
	r, ok := s.reservations[id]
	if !ok {
		return nil, false
	}
	delete(s.reservations, id)
	return r.starts, r.expiresAt > nowMillis
}

// keepUntil keeps key live until until at least: a delayed request's
// place is reserved on its state. The shard's lock is held.
func (s *memoryShard) keepUntil(key memoryKey, until int64) {
	if s.reservedUntil == nil {
		s.reservedUntil = make(map[memoryKey]int64)
	}
	s.reservedUntil[key] = max(s.reservedUntil[key], until)
}

// sweepReservations forgets the expired reservation records, and the
// keys they no longer keep live; the shard's lock is held.
func (s *memoryShard) sweepReservations(nowMillis int64) {
	for id, r := range s.reservations {
		if r.expiresAt <= nowMillis {
			delete(s.reservations, id)
		}
	}
	for key, until := range s.reservedUntil {
		if until <= nowMillis {
			delete(s.reservedUntil, key)
		}
	}
}

// giveBack gives back the place req, decided as reserved, took when it
// was admitted with a delay (Held) and that it will never use: its client
// left while it was held. Every policy it charged gets its cost back
// where it was charged, once. It never blocks; it does nothing for a
// request that was not held.
func (m *Memory) giveBack(req Request, reserved Evaluated) {
	if Held(req, reserved) == 0 || req.EvaluationID == "" {
		return
	}
	req.Phase = givingBack
	var keysOn [scratchPolicies]memoryKey
	keys := keysOn[:0]
	var keyBuf [160]byte
	for _, p := range req.Policies.list {
		keys = append(keys, m.sum(appendMemoryKey(keyBuf[:0], p, req.Subject)))
	}
	m.evaluate(req, keys)
}

// giveBack sends the give-back of req's place in the background, like a
// release: the rate-limit script in the give-back phase, which reads and
// deletes the request's reservation record. A give-back that fails, or
// is lost, leaves the place taken: the budget is spent as if the request
// had gone on. Once it is done this instance forgets the denials it
// remembers of the subject, which the place given back may end; another
// instance's stand until their retry time, refusing no more than they
// would have without the give-back.
func (r *Redis) giveBack(req Request, reserved Evaluated) {
	if reserved.Fallback || Held(req, reserved) == 0 || req.EvaluationID == "" {
		return
	}
	set := req.Policies
	cmd := r.command(set, req.Subject, scriptCall{cost: req.Cost, phase: givingBack, mayDelay: true, id: req.EvaluationID})
	r.inBackground(cmd, func() {
		if r.denials != nil {
			r.denials.forget(req.Subject)
		}
	})
}
