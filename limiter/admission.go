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
// have left is what they would have been charged more than their decision
// said: the cost, or a response-charged policy's reserve.
func uncharged(policies []*Policy, each []Decision, cost int64) {
	for i, p := range policies {
		if each[i].Allowed {
			each[i].Remaining += admissionCharge(p, cost)
		}
	}
}

// admissionCharge is what an admission of cost charges p: the cost, or
// for a policy charged by the response its reserve.
func admissionCharge(p *Policy, cost int64) int64 {
	if p.ChargedByResponse() {
		return p.Reserve
	}
	return cost
}

// Admitted is what may follow an admitted request, carried by its
// outcome (Evaluated.Admitted) as an http.Response carries its Body's
// Close: the leases it holds released or renewed (a concurrency policy),
// the place it took given back when it is never used (a delayed
// request whose client left), and the reserves of its policies charged by
// the response settled (Settlement). It goes to the backend that decided the
// request, with the request as that backend took it (a fallback's
// divided policies included). A nil *Admitted has nothing to follow:
// each of its methods does nothing.
type Admitted struct {
	by      follower
	req     Request
	decided Evaluated
	// starts are, for a request that reserved (a policy charged by the
	// response), each policy's state start after the admission: where a
	// reserve larger than its cost is given back.
	starts []int64
}

// follower is a backend that made an admission, acting on it.
type follower interface {
	Evaluate(ctx context.Context, req Request) Outcome
	release(req Request, leased Evaluated)
	renew(ctx context.Context, req Request, leased Evaluated)
	giveBack(req Request, reserved Evaluated)
	// returnReserve gives req.Cost back to req's one policy, in the state
	// whose start is start (returningLease).
	returnReserve(ctx context.Context, req Request, start int64) Outcome
	// settled: the reserve of req's one policy is settled, whatever the
	// settlement did.
	settled(req Request)
}

// admission is o, the outcome of req decided by by, with the Admitted
// that follows it when it is an admission that holds leases, a delayed
// place or a reserve; o itself otherwise, not boxed again (an Evaluated
// put back in an Outcome is an allocation). starts are each policy's
// state start after the admission, when the backend has them.
func admission(by follower, req Request, o Outcome, starts []int64) Outcome {
	e, ok := o.(Evaluated)
	if !ok || !(holdsLeases(req, e) || Held(req, e) > 0 && req.EvaluationID != "" || reserving(req, e)) {
		return o
	}
	e.admitted = &Admitted{by: by, req: req, decided: e, starts: starts}
	return e
}

// reserving reports whether req, decided as e, is an admission that
// reserved: a policy of its set is charged by the response, and every
// enforced policy allowed.
func reserving(req Request, e Evaluated) bool {
	if req.Phase != Admission || !req.Policies.chargedByResponse {
		return false
	}
	for i, p := range req.Policies.list {
		if !p.Shadow && !e.PolicyDecision(i).Allowed {
			return false
		}
	}
	return true
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

// Settlement is the request that settles the request's i-th policy, one
// charged by the response, once the response says what it cost: the
// caller sends it to its limiter (Evaluate), as it sent the admission,
// with an EvaluationID and a Deadline of its own, once per such policy,
// whatever the response (a response the gateway answered itself costs
// 0). The cost replaces the reserve: what it is beyond it is charged
// whatever is left (a debt may follow), and what the reserve was beyond
// it is given back to the state it was charged to, while that still
// holds it (a window that has ended keeps it). A policy that did not
// allow the admission (a shadow one) reserved nothing: it is charged the
// whole cost. The settlement goes to the backend that made the admission
// (a fallback's local one included). An admission never settled keeps
// its reserves charged. On a nil *Admitted it is the zero Request, which
// no backend decides.
func (a *Admitted) Settlement(i int, cost int64) Request {
	if a == nil {
		return Request{}
	}
	set := a.req.Policies
	s := &settling{by: a.by}
	if a.decided.PolicyDecision(i).Allowed {
		s.reserved = set.list[i].Reserve
	}
	if i < len(a.starts) {
		s.start = a.starts[i]
	}
	return Request{Policies: set.alone(i), Subject: a.req.Subject, Cost: cost, Phase: Settlement, settles: s}
}

// settling is what a settlement request (Admitted.Settlement) settles:
// the reserve its policy's admission charged (0: none), in the state
// whose start is start, by the backend by.
type settling struct {
	by       follower
	reserved int64
	start    int64
}

// settle decides req, a settlement (Admitted.Settlement), on the
// backend that made its admission: the cost beyond the reserve charged
// as a Settlement, the reserve beyond the cost given back, nothing when
// the two are equal.
func (s *settling) settle(ctx context.Context, req Request) Outcome {
	p := req.Policies.list[0]
	if s.reserved > 0 {
		defer s.by.settled(req)
	}
	if req.Cost < 0 {
		return Incompatible{Reason: CostOutOfRange}
	}
	// (A fallback's divided policy may have a smaller max_cost.)
	req.Cost, req.settles = min(req.Cost, p.MaxCost), nil
	switch diff := req.Cost - s.reserved; {
	case diff > 0:
		req.Cost = diff
		return s.by.Evaluate(ctx, req)
	case diff < 0:
		req.Cost, req.Phase, req.EvaluationID = -diff, returningLease, ""
		return s.by.returnReserve(ctx, req, s.start)
	}
	return Evaluated{Decision: Decision{Allowed: true, Limit: p.Quota(), Certainty: p.Certainty()}}
}

// scratchPolicies is how many policies a request may have before a
// decision's per-policy scratch leaves the stack.
const scratchPolicies = 4
