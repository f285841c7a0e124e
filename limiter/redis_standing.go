package limiter

// StandingDenial reports a denial of req that this instance remembers
// (see denials), without a Redis call. Without the cache it reports none.
func (r *Redis) StandingDenial(req Request) (Evaluated, bool) {
	set := req.Policies
	if r.denials == nil || set == nil {
		return Evaluated{}, false
	}
	e, ok := r.denials.get(denialKey{set: set, subject: req.Subject, cost: req.Cost}, r.now(set.clockPolicy()))
	if !ok {
		return Evaluated{}, false
	}
	r.m.cached.Inc()
	return e, true
}
