package limiter

// reserveHold is what keeps a key live for the reserves of a
// response-charged policy (memoryShard.reserves): how many requests in
// flight reserved on it, and when the last of those reserves is void.
type reserveHold struct {
	n     int64
	until int64
}

// holdReserve keeps key live until its request's settlement, or until
// until at most. The shard's lock is held.
func (s *memoryShard) holdReserve(key memoryKey, until int64) {
	if s.reserves == nil {
		s.reserves = make(map[memoryKey]reserveHold)
	}
	h := s.reserves[key]
	s.reserves[key] = reserveHold{n: h.n + 1, until: max(h.until, until)}
}

// settleReserve ends one request's hold on key. The shard's lock is held.
func (s *memoryShard) settleReserve(key memoryKey) {
	h, ok := s.reserves[key]
	switch {
	case !ok:
	case h.n > 1:
		s.reserves[key] = reserveHold{n: h.n - 1, until: h.until}
	default:
		delete(s.reserves, key)
	}
}

// reserveHeld reports whether a request in flight holds a reserve on
// key at now.
func (s *memoryShard) reserveHeld(key memoryKey, now int64) bool {
	return s.reserves[key].until > now
}

// settled ends the hold on its key of the reserve req settles, a
// settlement of one policy (settling).
func (m *Memory) settled(req Request) {
	var keysOn [scratchPolicies]memoryKey
	key := m.keys(req, keysOn[:0])[0]
	s := &m.shards[key[0]%memoryShards]
	s.mu.Lock()
	s.settleReserve(key)
	s.mu.Unlock()
}
