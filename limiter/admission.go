package limiter

import "slices"

// admitted reports whether every enforced policy allowed: the rule that
// decides a request.
func admitted(policies []*Policy, each []Decision) bool {
	for i, p := range policies {
		if !p.Shadow && !each[i].Allowed {
			return false
		}
	}
	return true
}

// summary is the Decision that stands for a request with several policies
// (see Evaluated): allowed when every enforced policy allowed, and for a
// denial the longest waits among the enforced policies that denied.
func summary(policies []*Policy, each []Decision) Decision {
	var d Decision
	first := true
	for i, p := range policies {
		e := each[i]
		if p.Shadow || e.Allowed {
			continue
		}
		if first {
			d = Decision{Limit: e.Limit, Remaining: e.Remaining}
			first = false
		}
		d.RetryAfter = max(d.RetryAfter, e.RetryAfter)
		d.ResetAfter = max(d.ResetAfter, e.ResetAfter)
		if e.Certainty == Approximate {
			d.Certainty = Approximate
		}
	}
	if first {
		// Admitted: the first enforced policy's figures, or the first
		// policy's when all are shadow ones.
		at := 0
		for i, p := range policies {
			if !p.Shadow {
				at = i
				break
			}
		}
		d = each[at]
		d.Allowed = true
		d.RetryAfter = delay(policies, each)
	}
	return d
}

// evaluated is the outcome of a request whose policies decided each (see
// Evaluated): one policy's decision as it is, or for several their
// summary and a copy of each, which may be the caller's scratch.
func evaluated(policies []*Policy, each []Decision) Evaluated {
	if len(policies) == 1 {
		return Evaluated{Decision: each[0]}
	}
	return Evaluated{Decision: summary(policies, each), Policies: slices.Clone(each)}
}

// uncharged corrects, for a refused request, the decisions of the policies
// that would have allowed it: nothing was taken from them, so what they
// have left is cost more than their decision said. A policy charged by the
// response was only checked, never charged (see Phase).
func uncharged(policies []*Policy, each []Decision, cost int64) {
	for i, p := range policies {
		if each[i].Allowed && !p.ChargedByResponse() {
			each[i].Remaining += cost
		}
	}
}
