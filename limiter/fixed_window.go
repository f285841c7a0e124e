package limiter

func decideFixedWindow(p *Policy, st state, now, cost int64, debt bool) step {
	window := p.Window.Milliseconds()
	start := now - now%window
	spent := int64(0)
	if st.Valid && st.Start == start {
		spent = st.Count
	}
	reset := start + window - now
	if spent+cost > p.Limit && !debt {
		return step{decision: Decision{
			Limit: p.Limit, Remaining: p.Limit - spent,
			ResetAfter: ms(reset), RetryAfter: ms(reset),
		}}
	}
	spent += cost
	return step{
		decision:  Decision{Allowed: true, Limit: p.Limit, Remaining: p.Limit - spent, ResetAfter: ms(reset)},
		next:      state{Valid: true, Start: start, Count: spent, Seen: now},
		charged:   true,
		ttlMillis: reset + p.CleanupGrace.Milliseconds(),
	}
}
