package limiter

func decideSlidingCounter(p *Policy, st state, now, cost int64, debt bool, _ int64) step {
	window := p.Window.Milliseconds()
	start := now - now%window
	elapsed := now - start
	var current, previous int64
	if st.Valid {
		switch st.Start {
		case start:
			current, previous = st.Count, st.Prev
		case start - window:
			previous = st.Count
		}
	}
	estimate := previous*(window-elapsed)/window + current
	if estimate+cost > p.Limit && !debt {
		var retry int64
		if room := p.Limit - cost - current; room >= 0 {
			retry = decayWait(previous, room, window) - elapsed
		} else {
			retry = window - elapsed + decayWait(current, p.Limit-cost, window)
		}
		retry = max(retry, 1)
		reset := int64(0)
		if current > 0 {
			reset = 2*window - elapsed
		} else if previous > 0 {
			reset = window - elapsed
		}
		return step{decision: Decision{
			Limit: p.Limit, Remaining: max(p.Limit-estimate, 0),
			ResetAfter: ms(max(reset, retry)), RetryAfter: ms(retry),
		}}
	}
	current += cost
	return step{
		decision: Decision{
			Allowed: true, Limit: p.Limit, Remaining: p.Limit - estimate - cost,
			ResetAfter: ms(2*window - elapsed),
		},
		next:      state{Valid: true, Start: start, Count: current, Prev: previous, Seen: now},
		charged:   true,
		ttlMillis: 2*window - elapsed + p.CleanupGrace.Milliseconds(),
	}
}

// decayWait is the smallest offset e into a window at which the previous
// window's count, weighted by (window-e)/window and rounded down, is at most
// allowed.
func decayWait(count, allowed, window int64) int64 {
	if count <= allowed {
		return 0
	}
	return window - ((allowed+1)*window-1)/count
}

// giveBackSlidingCounter takes cost off the window that starts at start:
// the current one, or the previous one once the state has moved on.
func giveBackSlidingCounter(p *Policy, st state, cost, start int64) (state, bool) {
	switch {
	case !st.Valid:
		return st, false
	case st.Start == start:
		st.Count = max(st.Count-cost, 0)
	case st.Start == start+p.Window.Milliseconds():
		st.Prev = max(st.Prev-cost, 0)
	default:
		return st, false
	}
	return st, true
}
