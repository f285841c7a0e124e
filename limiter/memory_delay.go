package limiter

import "time"

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
	for key, h := range s.reserves {
		if h.until <= nowMillis {
			delete(s.reserves, key)
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
	m.evaluate(req, m.keys(req, keysOn[:0]), nil, nil)
}
