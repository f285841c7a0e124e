package limiter

import (
	"context"
	"slices"
)

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

// Admitted is what may follow an admitted request, carried by its
// outcome (Evaluated.Admitted) as an http.Response carries its Body's
// Close: the leases it holds released or renewed (a concurrency policy),
// and the place it took given back when it is never used (a delayed
// request whose client left). It goes to the backend that decided the
// request, with the request as that backend took it (a fallback's
// divided policies included). A nil *Admitted has nothing to follow:
// each of its methods does nothing.
type Admitted struct {
	by      follower
	req     Request
	decided Evaluated
}

// follower is a backend that made an admission, acting on it.
type follower interface {
	release(req Request, leased Evaluated)
	renew(ctx context.Context, req Request, leased Evaluated)
	giveBack(req Request, reserved Evaluated)
}

// admission is e, the outcome of req decided by by, with the Admitted
// that follows it when it holds leases or a delayed place; e as it is
// otherwise.
func admission(by follower, req Request, e Evaluated) Evaluated {
	if holdsLeases(req, e) || Held(req, e) > 0 && req.EvaluationID != "" {
		e.admitted = &Admitted{by: by, req: req, decided: e}
	}
	return e
}

// Admitted is what may follow e (see Admitted); nil when nothing does.
func (e Evaluated) Admitted() *Admitted { return e.admitted }

// Release gives back the leases the request holds. It never blocks: on
// Redis the release is queued for the background (a bounded queue, see
// redis_background.go), and one that fails or is dropped is recovered by
// the leases' expiry. A lease released twice is released once.
func (a *Admitted) Release() {
	if a != nil {
		a.by.release(a.req, a.decided)
	}
}

// Renew gives the leases the request holds another LeaseTTL; a caller
// whose request is open for longer than a third of it renews. It blocks
// for at most the backend's call.
func (a *Admitted) Renew(ctx context.Context) {
	if a != nil {
		a.by.renew(ctx, a.req, a.decided)
	}
}

// GiveBack gives back the place a request admitted with a delay (Held)
// took, and will never use: its client left while it was held. It never
// blocks: on Redis it is sent in the background, and one that fails
// leaves the place taken.
func (a *Admitted) GiveBack() {
	if a != nil {
		a.by.giveBack(a.req, a.decided)
	}
}

// scratchPolicies is how many policies a request may have before a
// decision's per-policy scratch leaves the stack.
const scratchPolicies = 4
