package limiter

import "time"

func leaseTTL(p *Policy) time.Duration { return p.LeaseTTL }

// concurrencyRetry is a concurrency denial's wait: a slot frees when any
// request of the subject ends, which nothing predicts.
const concurrencyRetry = time.Second

func decideConcurrency(p *Policy, st state, now, cost int64, _ bool, _ int64) step {
	held := st.Count
	next := state{Valid: true, Count: held + cost, Seen: now}
	ttl := p.LeaseTTL.Milliseconds() + p.CleanupGrace.Milliseconds()
	if held+cost > p.Limit {
		return step{
			decision: Decision{Limit: p.Limit, Remaining: max(p.Limit-held, 0),
				ResetAfter: concurrencyRetry, RetryAfter: concurrencyRetry},
			next: next, charged: p.Shadow, ttlMillis: ttl,
		}
	}
	return step{
		decision:  Decision{Allowed: true, Limit: p.Limit, Remaining: p.Limit - held - cost},
		next:      next,
		charged:   true,
		ttlMillis: ttl,
	}
}

// giveBackConcurrency gives nothing back: a lease ends by its release.
func giveBackConcurrency(*Policy, state, int64, int64) (state, bool) { return state{}, false }
