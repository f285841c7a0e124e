package limiter

// A standing denial is one a backend can tell without charging anything
// and without a round trip: a caller that would spend real work on a
// request only to have the limiter refuse it (a signature check, say)
// asks first. No standing denial says nothing: only Evaluate decides.

// StandingDenial reports the denial req would get now from the memory
// backend's own state, without charging anything. A request with several
// policies is not looked up (false).
func (m *Memory) StandingDenial(req Request) (Evaluated, bool) {
	if req.Policies == nil || req.Policies.Len() != 1 || req.Cost < 1 {
		return Evaluated{}, false
	}
	p := req.Policies.list[0]
	if p.HoldsLeases() {
		return Evaluated{}, false // any release may end it
	}
	var keyBuf [160]byte
	key := m.sum(appendMemoryKey(keyBuf[:0], p, req.Subject))
	nowMillis := m.clock.Now().UnixMilli()
	s := &m.shards[key[0]%memoryShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	i, e := s.find(key)
	if i == 0 || e.expiresAt <= nowMillis {
		return Evaluated{}, false
	}
	res := decide(p, e.state(p.Algorithm), nowMillis, req.Cost, req.Phase, req.MayDelay)
	if res.clockUnsafe || res.decision.Allowed {
		return Evaluated{}, false
	}
	return Evaluated{Decision: res.decision}, true
}

// StandingDenial reports a denial of req that this instance remembers
// (see denials), without a Redis call. Without the cache, or for a
// request with several policies, it reports none.
func (r *Redis) StandingDenial(req Request) (Evaluated, bool) {
	set := req.Policies
	if r.denials == nil || set == nil || set.Len() != 1 {
		return Evaluated{}, false
	}
	e, ok := r.denials.get(denialKey{set: set, subject: req.Subject, cost: req.Cost}, r.now(set.clockPolicy()))
	if !ok {
		return Evaluated{}, false
	}
	r.m.cached.Inc()
	return e, true
}

// StandingDenial is the shared backend's: the fallback's own state is of
// an outage, and may be stale once Redis decides again.
func (f *fallback) StandingDenial(req Request) (Evaluated, bool) {
	return f.shared.StandingDenial(req)
}
