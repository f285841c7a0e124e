package limiter

import "context"

// heldLease is one lease of the memory backend.
type heldLease struct {
	cost      int64
	expiresAt int64 // milliseconds
}

// held is the cost of the live leases of key at now; expired ones go.
func (s *memoryShard) held(key memoryKey, now int64) int64 {
	set := s.leases[key]
	var n int64
	for id, l := range set {
		if l.expiresAt <= now {
			delete(set, id)
			continue
		}
		n += l.cost
	}
	return n
}

// lease records the lease id of key until expiresAt.
func (s *memoryShard) lease(key memoryKey, id evaluationKey, cost, expiresAt int64) {
	set := s.leases[key]
	if set == nil {
		set = make(map[evaluationKey]heldLease)
		s.leases[key] = set
	}
	set[id] = heldLease{cost: cost, expiresAt: expiresAt}
}

// release gives back the leases req took when it was admitted (leased,
// its outcome; Admitted.Release). A request with no concurrency policy,
// or one refused, holds none.
func (m *Memory) release(req Request, leased Evaluated) {
	m.eachLease(req, leased, func(s *memoryShard, key memoryKey, set map[evaluationKey]heldLease, id evaluationKey, _ *Policy, _ int64) {
		delete(set, id)
		if len(set) == 0 {
			delete(s.leases, key)
		}
	})
}

// renew gives the leases req holds another LeaseTTL from now. A lease
// released, or void already, stays so.
func (m *Memory) renew(_ context.Context, req Request, leased Evaluated) {
	m.eachLease(req, leased, func(s *memoryShard, key memoryKey, set map[evaluationKey]heldLease, id evaluationKey, p *Policy, now int64) {
		l, ok := set[id]
		if !ok || l.expiresAt <= now {
			return
		}
		l.expiresAt = now + p.LeaseTTL.Milliseconds()
		set[id] = l
		if i, e := s.find(key); i != 0 {
			e.expiresAt = max(e.expiresAt, l.expiresAt+p.CleanupGrace.Milliseconds())
		}
	})
}

// eachLease calls fn, under its shard's lock, for every lease set in
// which req holds a lease.
func (m *Memory) eachLease(req Request, leased Evaluated, fn func(s *memoryShard, key memoryKey, set map[evaluationKey]heldLease, id evaluationKey, p *Policy, now int64)) {
	if !holdsLeases(req, leased) {
		return
	}
	id := m.sumString(req.EvaluationID)
	var keyBuf [160]byte
	for _, p := range req.Policies.list {
		if !p.HoldsLeases() {
			continue
		}
		key := m.sum(appendMemoryKey(keyBuf[:0], p, req.Subject))
		s := &m.shards[key[0]%memoryShards].memoryShard
		s.mu.Lock()
		if set := s.leases[key]; set != nil {
			fn(s, key, set, id, p, m.clock.Now().UnixMilli())
		}
		s.mu.Unlock()
	}
}
