package limiter

import (
	"context"
	"time"
)

// Outcome is the result of one evaluation. It is sealed: the only
// implementations are Evaluated, Unavailable, Indeterminate and Incompatible,
// and a caller maps them with one type switch.
type Outcome interface {
	outcome()
}

// Evaluated means the limiter decided. Allowed or denied is in the Decision.
//
// For a request with several policies, Policies holds each policy's own
// decision, in the request's order, and the embedded Decision sums them
// up: Allowed when every enforced policy allowed (then every policy that
// allowed was charged, shadow ones included; otherwise none was), and for
// a denial the longest RetryAfter and ResetAfter among the enforced
// policies that denied, with the Limit and Remaining of the first of them
// (for an admission, the first enforced policy's figures, with the longest
// Delay of the enforced policies).
// For a one-policy request Policies is nil and the Decision is the
// policy's own, a shadow policy's denial included. PolicyDecision reads
// either alike.
type Evaluated struct {
	Decision
	Policies []Decision
	admitted *Admitted
}

// PolicyDecision is the decision of the request's i-th policy.
func (e Evaluated) PolicyDecision(i int) Decision {
	if e.Policies == nil {
		return e.Decision
	}
	return e.Policies[i]
}

// Unavailable means no decision was made and, as far as the limiter knows,
// nothing was charged.
type Unavailable struct {
	Category UnavailableCategory
	Err      error
}

// Indeterminate means a command was sent and its effect is unknown: the
// budget may have been consumed. It is never reported as Unavailable, whose
// categories promise that nothing was sent or nothing could be decided.
type Indeterminate struct {
	Err error
}

// Incompatible means the request and the configured policy, or the stored
// state, do not fit together. It is a configuration error, not a fault.
type Incompatible struct {
	Reason IncompatibleReason
	Err    error
}

func (Evaluated) outcome()     {}
func (Unavailable) outcome()   {}
func (Indeterminate) outcome() {}
func (Incompatible) outcome()  {}

// UnavailableCategory says why no decision was made.
type UnavailableCategory uint8

const (
	// AdmissionRejected: the deadline was already spent before any work.
	AdmissionRejected UnavailableCategory = iota + 1
	// UnavailableBeforeSend: the backend could not be reached; nothing was sent.
	UnavailableBeforeSend
	// ClockUnsafe: stored state is further in the future than the policy's
	// max_clock_regression allows.
	ClockUnsafe
	// CircuitOpen: the backend's node failed often enough that calls to it
	// are refused at once for a while; nothing was sent.
	CircuitOpen
	// StoreFull: the memory backend is full of keys that hold something
	// live (leases, reserved places), none of which it may drop for a new
	// one; nothing was charged.
	StoreFull
)

func (c UnavailableCategory) String() string {
	switch c {
	case AdmissionRejected:
		return "admission_rejected"
	case UnavailableBeforeSend:
		return "unavailable_before_send"
	case ClockUnsafe:
		return "clock_unsafe"
	case CircuitOpen:
		return "circuit_open"
	case StoreFull:
		return "store_full"
	}
	return "unknown"
}

// IncompatibleReason says which configuration error was found.
type IncompatibleReason uint8

const (
	UnknownPolicy IncompatibleReason = iota + 1
	CostOutOfRange
	StateUnreadable
	// LeaseWithoutID: a request under a concurrency policy has no
	// EvaluationID to name its lease by.
	LeaseWithoutID
	// ReservationWithoutID: a request that may be delayed has no
	// EvaluationID to name its reservation by.
	ReservationWithoutID
)

func (r IncompatibleReason) String() string {
	switch r {
	case UnknownPolicy:
		return "unknown_policy"
	case CostOutOfRange:
		return "cost_out_of_range"
	case StateUnreadable:
		return "state_unreadable"
	case LeaseWithoutID:
		return "lease_without_id"
	case ReservationWithoutID:
		return "reservation_without_id"
	}
	return "unknown"
}

// Certainty says whether a decision is exact for its algorithm.
type Certainty uint8

const (
	Certain Certainty = iota
	// Approximate: an estimate, as the sliding counter's are (Policy.Certainty
	// says which algorithms estimate).
	Approximate
)

func (c Certainty) String() string {
	if c == Approximate {
		return "approximate"
	}
	return "certain"
}

// Decision is what the limiter decided for one request.
//
// For a denial, RetryAfter is the earliest time after which the same request
// could be allowed (held for up to the policy's MaxDelay, when its caller
// can hold it), and ResetAfter is never shorter than RetryAfter. For an
// allowed request RetryAfter is its delay (Delay): zero, unless a policy's
// MaxDelay admitted it to go on only that long after the decision.
type Decision struct {
	Limit      int64 // the policy's quota
	Remaining  int64 // what is left after this request
	ResetAfter time.Duration
	RetryAfter time.Duration
	// The small fields come last, packed in one word: an Evaluated, which
	// a backend returns boxed in an Outcome, stays in an 80-byte size class.
	//
	// WindowSeconds is, for a policy with a Calendar, the length in
	// seconds of the period the decision counted in (a day of a
	// daylight-saving change is 82,800 or 90,000); 0 for any other policy,
	// whose window is its own.
	WindowSeconds uint32
	Allowed       bool
	Certainty     Certainty
	// Fallback: decided by this instance alone, with a divided budget,
	// while the shared backend could not decide (FallbackOptions).
	Fallback bool
}

// Delay is how long the caller holds an allowed request before it goes
// on: its place is reserved for then (Policy.MaxDelay). Zero for a denial.
func (d Decision) Delay() time.Duration {
	if !d.Allowed {
		return 0
	}
	return d.RetryAfter
}

// Request is one question to the limiter. Subject is a pseudonym, never a
// raw identity.
type Request struct {
	// Policies are decided at once, atomically, for the same subject and
	// cost (PolicySet). The request is admitted when every enforced (not
	// Shadow) policy allows, and then each policy that allows is charged;
	// when any enforced one denies, none is charged. When the set holds
	// leases (PolicySet.HoldsLeases), an admitted request holds them under
	// EvaluationID, which it then needs, until it is released (Admitted.Release).
	Policies     *PolicySet
	Subject      string
	Cost         int64
	EvaluationID string
	// NewID: EvaluationID was made for this request and never given to a
	// backend before (the gateway's own IDs), so no decision is under it
	// yet and a backend need not look for one; the decision is remembered
	// all the same, for a retry. Without it a request under an ID already
	// decided repeats that decision (de-duplication).
	NewID bool
	// Route is the operation ID of the route the request is made for: a
	// label of the limiter's metrics, never part of a key. Only
	// admissions made for a route count in gateway_limiter_duration_seconds
	// and gateway_limiter_fallback_total.
	Route string
	// Phase is Admission, before forwarding, or Settlement, after the
	// response, which charges the policies given (those of the request
	// charged by the response) whatever they have left; a settlement of
	// an admission's reserve is made by Admitted.Settlement.
	Phase Phase
	// MayDelay: the caller can hold an admitted request for its Delay
	// before it goes on, and give its place back (Admitted.GiveBack) if it
	// never goes; the policies' MaxDelay applies, and a delayed request
	// needs an EvaluationID. Without it a request MaxDelay would have
	// delayed is refused.
	MayDelay bool
	// Deadline bounds the evaluation, as the context's deadline does; the
	// earlier of the two applies. It is a field so that a backend that never
	// blocks (memory) costs the caller no timer and no derived context.
	Deadline time.Time
	// Start is when the caller read the clock to set Deadline, if it did:
	// gateway_limiter_duration_seconds times an admission from it rather
	// than read the clock again. Zero: from when Evaluate is called.
	Start time.Time
	// settles, on a settlement of an admission (Admitted.Settlement),
	// is what it settles.
	settles *settling
}

// DefaultDeadline is how long the gateway lets one evaluation take.
const DefaultDeadline = 750 * time.Millisecond

// admit runs the checks every backend makes before it touches state.
// It returns nil when the request may be evaluated. The deadline is wall-clock
// time, whatever clock the algorithms read.
func admit(ctx context.Context, req Request) Outcome {
	if req.Policies == nil {
		return Incompatible{Reason: UnknownPolicy}
	}
	for _, p := range req.Policies.list {
		if req.Cost < 1 || req.Cost > p.MaxCost {
			return Incompatible{Reason: CostOutOfRange}
		}
		if req.EvaluationID == "" && p.HoldsLeases() {
			return Incompatible{Reason: LeaseWithoutID}
		}
		if req.EvaluationID == "" && req.MayDelay && p.MaxDelay > 0 {
			return Incompatible{Reason: ReservationWithoutID}
		}
	}
	if err := ctx.Err(); err != nil {
		return Unavailable{Category: AdmissionRejected, Err: err}
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= 0 {
		return Unavailable{Category: AdmissionRejected, Err: context.DeadlineExceeded}
	}
	if !req.Deadline.IsZero() && time.Until(req.Deadline) <= 0 {
		return Unavailable{Category: AdmissionRejected, Err: context.DeadlineExceeded}
	}
	return nil
}

// OutcomeName is the word logs and metrics name o by: allowed, denied,
// fallback_allowed, fallback_denied, an Unavailable's category
// (admission_rejected, unavailable_before_send, clock_unsafe,
// circuit_open, store_full), indeterminate or incompatible.
func OutcomeName(o Outcome) string {
	switch o := o.(type) {
	case Evaluated:
		switch {
		case o.Fallback && o.Allowed:
			return "fallback_allowed"
		case o.Fallback:
			return "fallback_denied"
		case o.Allowed:
			return "allowed"
		}
		return "denied"
	case Unavailable:
		return o.Category.String()
	case Indeterminate:
		return "indeterminate"
	case Incompatible:
		return "incompatible"
	}
	return "unknown"
}
