package limiter

// A concurrency policy's leases, and how a caller gives them back. An
// admitted request under such a policy holds a lease (cost leases) named
// by its evaluation ID from its decision until its caller releases it, or
// until the policy's LeaseTTL passes without a renewal: a caller that dies
// holding leases loses them by expiry.

// holdsLeases reports whether the request req decided as e holds leases:
// it has a concurrency policy and was admitted (every enforced policy
// allowed; a shadow one takes its lease even when it would have refused).
func holdsLeases(req Request, e Evaluated) bool {
	if req.EvaluationID == "" || !req.Policies.holdsLeases {
		return false
	}
	for i, p := range req.Policies.list {
		if !p.Shadow && !e.PolicyDecision(i).Allowed {
			return false
		}
	}
	return true
}
