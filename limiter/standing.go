package limiter

// A standing denial is one a backend can tell without charging anything
// and without a round trip: a caller that would spend real work on a
// request only to have the limiter refuse it (a signature check, say)
// asks first. No standing denial says nothing: only Evaluate decides.

// StandingDenial reports the denial req would get now from the memory
// backend's own state, without charging anything: one of its enforced
// policies refuses it. Each policy's state is read under its own shard's
// lock, one after another: the answer is a hint, as a remembered denial
// on Redis is. A set that holds leases is not looked up (false): any
// release may end its denial.
func (m *Memory) StandingDenial(req Request) (Evaluated, bool) {
	set := req.Policies
	if set == nil || set.holdsLeases || req.Cost < 1 {
		return Evaluated{}, false
	}
	var eachOn [scratchPolicies]Decision
	each := eachOn[:0]
	var keyBuf [160]byte
	for _, p := range set.list {
		key := m.sum(appendMemoryKey(keyBuf[:0], p, req.Subject))
		nowMillis := m.clock.Now().UnixMilli()
		s := &m.shards[key[0]%memoryShards]
		s.mu.Lock()
		i, e := s.find(key)
		if i == 0 || e.expiresAt <= nowMillis {
			e = nil
		}
		st := s.current(key, e, p, nowMillis)
		s.mu.Unlock()
		res := decide(p, st, nowMillis, req.Cost, req.Phase, req.MayDelay)
		if res.clockUnsafe {
			return Evaluated{}, false
		}
		each = append(each, res.decision)
	}
	if admitted(set.list, each) {
		return Evaluated{}, false
	}
	uncharged(set.list, each, req.Cost)
	return evaluated(set.list, each), true
}

// StandingDenial reports a denial of req that this instance remembers
// (see denials), without a Redis call. Without the cache it reports none.
func (r *Redis) StandingDenial(req Request) (Evaluated, bool) {
	set := req.Policies
	if r.denials == nil || set == nil {
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
