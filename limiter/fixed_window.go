package limiter

func decideFixedWindow(p *Policy, st state, now, cost int64, debt bool) step {
	start, end := p.windowAt(now)
	spent := int64(0)
	if st.Valid && st.Start == start {
		spent = st.Count
	}
	reset := end - now
	var windowSeconds uint32
	if p.Calendar != 0 {
		windowSeconds = uint32((end - start + 999) / 1000)
	}
	if spent+cost > p.Limit && !debt {
		return step{decision: Decision{
			Limit: p.Limit, Remaining: p.Limit - spent,
			ResetAfter: ms(reset), RetryAfter: ms(reset), WindowSeconds: windowSeconds,
		}}
	}
	spent += cost
	return step{
		decision:  Decision{Allowed: true, Limit: p.Limit, Remaining: p.Limit - spent, ResetAfter: ms(reset), WindowSeconds: windowSeconds},
		next:      state{Valid: true, Start: start, Count: spent, Seen: now},
		charged:   true,
		ttlMillis: reset + p.CleanupGrace.Milliseconds(),
	}
}
