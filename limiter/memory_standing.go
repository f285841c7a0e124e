package limiter

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
		q := s.policyFor(key, p, nowMillis)
		st := s.current(key, e, q, nowMillis)
		s.mu.Unlock()
		res := decide(q, st, nowMillis, req.Cost, req.Phase, req.MayDelay)
		if res.clockUnsafe {
			return Evaluated{}, false
		}
		res.decision.Limit = p.Quota()
		each = append(each, res.decision)
	}
	if admitted(set.list, each) {
		return Evaluated{}, false
	}
	uncharged(set.list, each, req.Cost)
	return evaluated(set.list, each), true
}
