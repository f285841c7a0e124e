package limiter

import "context"

// Peek reports each of req's policies' state for req.Subject, read under
// the shard's lock: each policy's decision for a request of cost 0 (its
// Remaining what a request would have left to spend, its ResetAfter when
// it is whole again). Nothing is charged, written or remembered.
func (m *Memory) Peek(ctx context.Context, req Request) Outcome {
	if o := peekable(ctx, req); o != nil {
		return o
	}
	ps := req.Policies.list
	each := make([]Decision, len(ps))
	var keyBuf [160]byte
	for i, p := range ps {
		key := m.sum(appendMemoryKey(keyBuf[:0], p, req.Subject))
		s := &m.shards[key[0]%memoryShards]
		s.mu.Lock()
		nowMillis := m.clock.Now().UnixMilli()
		j, e := s.find(key)
		if j == 0 || e.expiresAt <= nowMillis {
			e = nil
		}
		st := s.current(key, e, p, nowMillis)
		s.mu.Unlock()
		res := decide(p, st, nowMillis, 0, Admission, false)
		if res.clockUnsafe {
			return Unavailable{Category: ClockUnsafe}
		}
		each[i] = res.decision
	}
	return evaluated(ps, each)
}

// Reset forgets req.Subject's state for each of req's policies, the
// evaluations remembered with it, and the leases it holds (a request
// still in flight then releases nothing): its next request starts with
// whole budgets.
func (m *Memory) Reset(ctx context.Context, req Request) error {
	if err := resettable(ctx, req); err != nil {
		return err
	}
	var keyBuf [160]byte
	for _, p := range req.Policies.list {
		key := m.sum(appendMemoryKey(keyBuf[:0], p, req.Subject))
		s := &m.shards[key[0]%memoryShards]
		s.mu.Lock()
		if i, _ := s.find(key); i != 0 {
			s.remove(i)
		}
		delete(s.leases, key)
		s.mu.Unlock()
	}
	return nil
}
