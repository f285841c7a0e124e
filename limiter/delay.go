package limiter

import (
	"math"
	"slices"
	"time"
)

// Delay instead of refusal (Policy.MaxDelay). A request that a policy
// would refuse but could admit within its MaxDelay is admitted at once
// with a delay: its place is taken now (the bucket goes into debt, or the
// next window's count grows), atomically with the request's other
// policies, so that every instance sharing the backend sees it. Its
// caller holds it for the delay, then forwards it; a caller whose client
// leaves first gives the place back (Admitted.GiveBack). The admission leaves a
// reservation record, by the request's evaluation ID, of where each
// policy was charged, which the give-back reads and deletes: a place is
// given back once, to the window it was taken in, and a record nobody
// reads expires shortly after the delay.

// validateMaxDelay adds the problems of MaxDelay. An algorithm that does
// not take it is the table's to refuse.
func (p *Policy) validateMaxDelay(problem func(field, summary, detail string, args ...any), millis func(string, time.Duration)) {
	if p.MaxDelay == 0 || !slices.Contains(p.Algorithm.takes(), "max_delay") {
		return
	}
	if p.MaxDelay < 0 || p.MaxDelay > MaxMaxDelay {
		problem("max_delay", "Duration out of range", "max_delay must be between 0s and %s.", MaxMaxDelay)
	} else {
		millis("max_delay", p.MaxDelay)
	}
	if p.ChargedByResponse() {
		problem("max_delay", "Argument not valid with a charge by the response", "max_delay does not apply to a policy charged by the response: its reserve is taken at once or refused, and what it costs is known only after the response.")
	}
}

// maxDelayMillis is how long a request of a caller that can hold it
// (mayDelay) may be delayed under p.
func (p *Policy) maxDelayMillis(mayDelay bool) int64 {
	if !mayDelay {
		return 0
	}
	return p.MaxDelay.Milliseconds()
}

// Held is how long the caller holds req, decided as e, before it goes on:
// the longest Delay of its enforced policies when every one of them
// allowed, else zero. A shadow policy's delay holds nothing: its request
// goes on at once, and the delay is only reported.
func Held(req Request, e Evaluated) time.Duration {
	if !req.MayDelay || req.Policies == nil {
		return 0
	}
	ps := req.Policies.list
	var each []Decision
	if e.Policies == nil {
		each = []Decision{e.Decision}
	} else {
		each = e.Policies
	}
	if len(each) != len(ps) || !admitted(ps, each) {
		return 0
	}
	return delay(ps, each)
}

// delay is the longest Delay of the enforced policies of an admitted
// request.
func delay(policies []*Policy, each []Decision) time.Duration {
	var d time.Duration
	for i, p := range policies {
		if !p.Shadow {
			d = max(d, each[i].Delay())
		}
	}
	return d
}

// givingBack is the phase of a give-back (Admitted.GiveBack): each policy of the
// request that its reservation record says was charged gets its cost
// back. It is never asked of Evaluate from outside the package.
const givingBack = Settlement + 1

// notCharged stands in a reservation record for a policy that the
// admission did not charge (a shadow policy that refused, or one charged
// by the response).
const notCharged = math.MinInt64

// giveBack is the step that gives back a charge of cost made at start
// (the reservation record's entry for p); it always allows.
func giveBack(p *Policy, st state, cost, start int64) step {
	res := step{decision: Decision{Allowed: true, Limit: p.Quota(), Certainty: p.Certainty()}}
	if start == notCharged || p.HoldsLeases() {
		return res
	}
	res.next, res.charged = p.Algorithm.spec().giveBack(p, st, cost, start)
	return res
}
