package limiter

import "time"

// windowLeft is how long the window of an admission decided as d still
// runs: its reset.
func windowLeft(_ *Policy, d Decision) time.Duration { return d.ResetAfter }

func decideFixedWindow(p *Policy, st state, now, cost int64, debt bool, maxDelay int64) step {
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
	// A state of the next window holds places reserved there, which a
	// request took only because this window was full for it: this one
	// admits nothing more.
	ahead := st.Valid && st.Start == end
	if ahead {
		spent = max(spent, p.Limit)
	}
	if spent+cost > p.Limit && !debt {
		if res, ok := reserveNextWindow(p, st, now, cost, end, maxDelay); ok {
			return res
		}
		retry := reset
		if maxDelay > 0 {
			retry = max(retry-maxDelay, 0)
			if ahead && st.Count+cost > p.Limit {
				_, nextEnd := p.windowAt(end)
				retry = nextEnd - now - maxDelay
			}
		}
		return step{decision: Decision{
			Limit: p.Limit, Remaining: p.Limit - spent,
			ResetAfter: ms(max(reset, retry)), RetryAfter: ms(retry), WindowSeconds: windowSeconds,
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

// reserveNextWindow admits a request that the window ending at end cannot
// take, with the delay until end, when end is within maxDelay and the
// next window has room for it: its place is taken there now.
func reserveNextWindow(p *Policy, st state, now, cost, end, maxDelay int64) (step, bool) {
	if end-now > maxDelay || maxDelay == 0 {
		return step{}, false
	}
	reserved := int64(0)
	if st.Valid && st.Start == end {
		reserved = st.Count
	}
	if reserved+cost > p.Limit {
		return step{}, false
	}
	_, nextEnd := p.windowAt(end)
	var windowSeconds uint32
	if p.Calendar != 0 {
		windowSeconds = uint32((nextEnd - end + 999) / 1000)
	}
	reserved += cost
	return step{
		decision: Decision{Allowed: true, Limit: p.Limit, Remaining: p.Limit - reserved,
			ResetAfter: ms(nextEnd - now), RetryAfter: ms(end - now), WindowSeconds: windowSeconds},
		next:      state{Valid: true, Start: end, Count: reserved, Seen: now},
		charged:   true,
		ttlMillis: nextEnd - now + p.CleanupGrace.Milliseconds(),
	}, true
}

// giveBackFixedWindow takes cost off the window that starts at start,
// while the state is still that window's.
func giveBackFixedWindow(_ *Policy, st state, cost, start int64) (state, bool) {
	if !st.Valid || st.Start != start {
		return st, false
	}
	st.Count = max(st.Count-cost, 0)
	return st, true
}
