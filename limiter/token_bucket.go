package limiter

import "time"

func capacity(p *Policy) int64             { return p.Capacity }
func refillPeriod(p *Policy) time.Duration { return p.RefillPeriod }

// bucketFill is the time a drained bucket takes to fill again.
func bucketFill(p *Policy) time.Duration { return refill(p, p.Capacity) }

// maxCostRefill is the time the bucket takes to gain max_cost tokens.
func maxCostRefill(p *Policy) time.Duration { return refill(p, p.MaxCost) }

// refill is the time the bucket takes to gain n tokens.
func refill(p *Policy, n int64) time.Duration {
	periods := (n + p.RefillTokens - 1) / p.RefillTokens
	return time.Duration(periods) * p.RefillPeriod
}

// untilRefill is how long after an admission decided as d the bucket
// gains its next tokens: its reset is the time to be full again, which is
// whole refill periods after the next refill.
func untilRefill(p *Policy, d Decision) time.Duration {
	periods := (p.Capacity - d.Remaining + p.RefillTokens - 1) / p.RefillTokens
	return max(d.ResetAfter-time.Duration(max(periods-1, 0))*p.RefillPeriod, 0)
}

func decideTokenBucket(p *Policy, st state, now, cost int64, debt bool, maxDelay int64) step {
	period := p.RefillPeriod.Milliseconds()
	tokens, refilled := p.Capacity, now
	if st.Valid {
		tokens, refilled = st.Count, st.Start
		if periods := (now - refilled) / period; periods > 0 {
			// Only whole periods are added, and the timestamp moves by whole
			// periods, so the partial period in progress is kept.
			refilled += periods * period
			if missing := p.Capacity - tokens; periods >= (missing+p.RefillTokens-1)/p.RefillTokens {
				tokens = p.Capacity
			} else {
				tokens += periods * p.RefillTokens
			}
		}
	}
	untilFull := func(tokens int64) int64 {
		if tokens >= p.Capacity {
			return 0
		}
		periods := (p.Capacity - tokens + p.RefillTokens - 1) / p.RefillTokens
		return refilled + periods*period - now
	}
	delay := int64(0)
	if tokens < cost && !debt {
		periods := (cost - tokens + p.RefillTokens - 1) / p.RefillTokens
		retry := refilled + periods*period - now
		if retry > maxDelay {
			// A retry is admitted, held, once its tokens are due within
			// maxDelay.
			return step{decision: Decision{
				Limit: p.Capacity, Remaining: tokens,
				ResetAfter: ms(untilFull(tokens)), RetryAfter: ms(retry - maxDelay),
			}}
		}
		// Taken now, into a debt the refills of the delay pay back.
		delay = retry
	}
	tokens -= cost
	reset := untilFull(tokens)
	return step{
		decision:  Decision{Allowed: true, Limit: p.Capacity, Remaining: tokens, ResetAfter: ms(reset), RetryAfter: ms(delay)},
		next:      state{Valid: true, Start: refilled, Count: tokens, Seen: now},
		charged:   true,
		ttlMillis: reset + p.CleanupGrace.Milliseconds(),
	}
}

// giveBackTokenBucket puts cost tokens back, up to capacity: adding them
// to the stored count before the refills since is the same as after, as
// both stop at capacity.
func giveBackTokenBucket(p *Policy, st state, cost, _ int64) (state, bool) {
	if !st.Valid {
		return st, false
	}
	st.Count = min(st.Count+cost, p.Capacity)
	return st, true
}
