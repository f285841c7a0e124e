package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/subject"
)

// limits is a route's policies, compiled: the request the limiter is asked
// and the header values every answer shares. A route's limit is a list of
// policies (policy = "x" is a list of one), decided at once; any of them
// may be a shadow policy, which is decided and charged but never changes
// the answer.
type limits struct {
	// set is what the limiter is asked; policies its policies, in order.
	set      *limiter.PolicySet
	policies []*limiter.Policy
	// shadowOnly: no policy is enforced, so nothing the limiter says (or
	// fails to say) keeps a request from the upstream.
	shadowOnly bool
	// names are the policy names as Structured Field strings, by position.
	names []string
	// policyHeader is the RateLimit-Policy value: one list member per
	// enforced policy, in route order; nil when shadowOnly.
	policyHeader []string
	// calendar: an enforced policy's window is a calendar period, whose
	// length, the header's w, is the decision's: RateLimit-Policy is made
	// per decision, not once.
	calendar bool
	// enforced counts the enforced policies; problem429 is the 429 body
	// when every one of them denied, as the only one of a route always does.
	enforced   int
	problem429 []byte
	// leases: a policy holds leases, so an admitted request holds them
	// until its response is complete (lease.go); leaseTTL is the shortest
	// of their lease TTLs, and leasesHeld each policy's gauge (nil
	// without metrics, or for a policy without leases).
	leases     bool
	leaseTTL   time.Duration
	leasesHeld []prometheus.Gauge
	// charges are the policies charged by the response, in route order.
	charges []responseCharge
	// delays: a policy has max_delay, so the limiter is asked as a caller
	// that can hold the request while this instance has room to
	// (delay.go); delayObservers are each enforced such policy's series of
	// gateway_limiter_delay_seconds (nil without metrics).
	delays         bool
	delayObservers []prometheus.Observer
}

// newLimits compiles a list of policies that Route.Validate passed: none
// nil, each once.
func newLimits(ps []*limiter.Policy) (*limits, error) {
	set, err := limiter.NewPolicySet(ps...)
	if err != nil {
		return nil, err
	}
	l := &limits{set: set, policies: set.Policies(), shadowOnly: true}
	var members, enforced []string
	for _, p := range ps {
		l.names = append(l.names, sfString(p.Name))
		if !p.Shadow {
			l.shadowOnly = false
			members = append(members, string(appendPolicyMember(nil, l.names[len(l.names)-1], p, 0)))
			enforced = append(enforced, p.Name)
			l.calendar = l.calendar || p.Calendar != 0
		}
	}
	if len(members) > 0 {
		l.policyHeader = []string{strings.Join(members, ", ")}
	}
	l.enforced = len(enforced)
	l.problem429 = quotaProblem(enforced)
	l.leases = set.HoldsLeases()
	for _, p := range ps {
		if p.HoldsLeases() && (l.leaseTTL == 0 || p.LeaseTTL < l.leaseTTL) {
			l.leaseTTL = p.LeaseTTL
		}
	}
	if l.charges, err = newResponseCharges(ps); err != nil {
		return nil, err
	}
	l.delays = set.Delays()
	return l, nil
}

// setHeaders sets RateLimit-Policy and RateLimit: one member per enforced
// policy, in route order. Headers the upstream sends later are added
// beside ours: both are Structured Field lists, so the client sees every
// policy.
func (l *limits) setHeaders(h http.Header, o limiter.Evaluated) {
	if l.policyHeader == nil {
		return
	}
	var buf, policyBuf [160]byte
	b, pb := buf[:0], policyBuf[:0]
	for i, p := range l.policies {
		if p.Shadow {
			continue
		}
		if len(b) > 0 {
			b = append(b, ", "...)
			pb = append(pb, ", "...)
		}
		d := o.PolicyDecision(i)
		b = appendRateLimitMember(b, l.names[i], d, !p.HoldsLeases())
		if l.calendar {
			pb = appendPolicyMember(pb, l.names[i], p, d.WindowSeconds)
		}
	}
	h["Ratelimit"] = []string{string(b)}
	if l.calendar {
		h["Ratelimit-Policy"] = []string{string(pb)}
	} else {
		h["Ratelimit-Policy"] = l.policyHeader
	}
}

// admits reports whether the request may go on: every enforced policy
// allowed.
func (l *limits) admits(o limiter.Evaluated) bool {
	return o.Allowed || l.shadowOnly
}

// problem is the 429 body naming the enforced policies that denied, in
// route order.
func (l *limits) problem(o limiter.Evaluated) []byte {
	violated := func(i int) bool { return !l.policies[i].Shadow && !o.PolicyDecision(i).Allowed }
	n := 0
	for i := range l.policies {
		if violated(i) {
			n++
		}
	}
	if n == l.enforced {
		return l.problem429
	}
	names := make([]string, 0, n)
	for i, p := range l.policies {
		if violated(i) {
			names = append(names, p.Name)
		}
	}
	return quotaProblem(names)
}

// shadowDenials lists the shadow policies that would have denied.
func (l *limits) shadowDenials(o limiter.Evaluated) []string {
	var names []string
	for i, p := range l.policies {
		if p.Shadow && !o.PolicyDecision(i).Allowed {
			names = append(names, p.Name)
		}
	}
	return names
}

// appendRateLimitMember is one member of RateLimit: what is left, and
// with reset the seconds until the quota is whole again (a concurrency
// policy's frees when requests end, which no time says).
func appendRateLimitMember(b []byte, name string, d limiter.Decision, reset bool) []byte {
	b = append(b, name...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, max(d.Remaining, 0), 10)
	if !reset {
		return b
	}
	b = append(b, ";t="...)
	return strconv.AppendInt(b, ceilSeconds(d.ResetAfter), 10)
}

// limit asks the limiter and answers for every outcome but an allowed one.
// It reports whether the request may go on.
func (h *Handler) limit(w http.ResponseWriter, r *http.Request, c *compiled, rt *route, x *exchange) bool {
	s, err := x.in.Resolve(rt.query)
	if err != nil {
		h.unresolved(w, r, c, err, x)
		return false
	}
	x.subjectKind, x.pseudonym = s.Kind, s.Pseudonym
	switch {
	case s.Plan != "":
		x.plan = s.Plan
	case s.PlanUnknown:
		x.plan = "other"
	}
	if h.penalized(w, c, rt, s.Pseudonym, x) {
		return false
	}

	l := rt.limitsFor(s.Plan)
	if l == nil {
		// Only plans limit this route, and the subject has none of them.
		x.outcome = "unlimited"
		return true
	}
	start := time.Now()
	req := limiter.Request{
		Policies:     l.set,
		Subject:      s.Pseudonym,
		Cost:         rt.Cost,
		EvaluationID: h.evalIDs.next(),
		NewID:        true,
		Route:        rt.OperationID,
		Deadline:     start.Add(c.deadline),
		Start:        start,
	}
	if l.delays && h.held.take(c.maxDelayed) {
		// A place among max_delayed, taken for the decision and kept while
		// the request is held; without one, a request a policy would
		// delay is refused at once.
		req.MayDelay = true
		defer h.held.put()
	}
	ctx := r.Context()
	var span trace.Span
	if h.tracing != nil {
		ctx, span = h.tracing.startLimiter(ctx, l)
	}
	o := c.limiter.Evaluate(ctx, req)

	x.outcome = limiter.OutcomeName(o)
	x.limits, x.decision = l, x.outcome
	if span != nil {
		h.tracing.endLimiter(span, x.outcome)
	}
	if _, decided := o.(limiter.Evaluated); !decided && r.Context().Err() != nil {
		// The client went away before the decision: that is no limiter
		// failure, whatever the backend made of the cancelled call, and
		// nobody is left to read an answer. 499 is what the log says.
		x.outcome = "client_closed"
		w.WriteHeader(statusClientClosed)
		return false
	}
	switch o := o.(type) {
	case limiter.Evaluated:
		l.setHeaders(w.Header(), o)
		if l.admits(o) {
			return h.admitted(w, r, c, rt, l, req, o, x)
		}
		if !h.impose(ctx, w, c, rt, l, s.Pseudonym, o, x) {
			writeQuotaExceeded(w, l.problem(o), o.RetryAfter)
		}
		return false
	case limiter.Incompatible:
		h.opts.Logger.LogAttrs(r.Context(), slog.LevelError, "limiter configuration error",
			slog.String("route", rt.OperationID), slog.String("policy", l.policies[0].Name),
			slog.String("reason", o.Reason.String()), errAttr(o.Err))
	}
	// Unavailable, Indeterminate, Incompatible, and anything a backend adds
	// later: fail closed, unless no policy is enforced.
	if l.shadowOnly {
		return true
	}
	writeUnavailable(w, c.failureRetryAfter)
	return false
}

// admitted goes on with a request the limiter admitted: it holds its
// leases, records what shadow policies would have done, holds it for its
// delay, and readies the settlement of its response charges. It reports
// whether the request may go on (false: the client left while it was
// held).
func (h *Handler) admitted(w http.ResponseWriter, r *http.Request, c *compiled, rt *route, l *limits, req limiter.Request, o limiter.Evaluated, x *exchange) bool {
	if l.leases {
		x.lease = holdLease(o, req.Cost, l)
	}
	if names := l.shadowDenials(o); names != nil {
		h.shadowDenied(rt, names, x)
	}
	if names, d := l.shadowDelays(o); names != "" && x.shadowDenied == "" {
		// Logged as what it would have been; nothing is held.
		x.outcome, x.shadowDenied, x.delay = "shadow_delayed", names, d
	}
	if l.charges != nil {
		// Settled when the exchange ends (ServeHTTP), whatever ends it.
		x.settling = &settlement{h: h, limiter: c.limiter, admitted: o.Admitted(), charges: l.charges, subject: req.Subject,
			route: rt.OperationID, timeout: c.deadline, ctx: context.WithoutCancel(r.Context())}
	}
	if held := limiter.Held(req, o); held > 0 {
		if !h.hold(r, l, o, held, x) {
			w.WriteHeader(statusClientClosed)
			return false
		}
		l.setHeaders(w.Header(), afterHold(o, held))
	}
	return true
}

// unresolved answers a request whose subject could not be resolved. It is
// apart from limit so that the target of errors.As, which escapes, is
// allocated only for a request that failed.
func (h *Handler) unresolved(w http.ResponseWriter, r *http.Request, c *compiled, err error, x *exchange) {
	var spent *tokenBudgetSpent
	switch {
	case errors.Is(err, subject.ErrAmbiguousCredential):
		x.outcome = "rejected"
		writeProblem(w, problemAmbiguousCredential)
	case errors.Is(err, subject.ErrBadSubject):
		x.outcome = "rejected"
		writeProblem(w, problemBadSubject)
	case errors.As(err, &spent):
		c.tokens.refuse(w, spent.client, spent.decision, x)
	case errors.Is(err, subject.ErrInvalidToken):
		// The route's budgets are not charged: the token names nobody.
		// The client's budget of invalid tokens is.
		if client, d, over := c.tokens.charge(r, x.in); over && !c.tokens.limits.shadowOnly {
			c.tokens.refuse(w, client, d, x)
			return
		}
		x.outcome, x.subjectKind = "invalid_token", subject.JWT
		var te *subject.TokenError
		if errors.As(err, &te) {
			x.reason = te.Reason
		}
		writeInvalidToken(w)
	case errors.Is(err, subject.ErrKeysUnavailable):
		x.outcome, x.subjectKind = "token_keys_unavailable", subject.JWT
		w.Header()["Retry-After"] = []string{c.failureRetryAfter}
		writeProblem(w, problemKeysUnavailable)
	default:
		x.outcome = "unidentified"
		writeProblem(w, problemUnidentified)
	}
}

// settle ends the request's settlement, if it has one, and waits for it:
// the exchange is over, and whatever the upstream did not charge goes
// back.
func (x *exchange) settle() {
	if x.settling != nil {
		x.settling.finish()
		x.settling = nil
	}
}

// releaseLease ends the request's hold on its leases, if it has one:
// its response is complete, or will never be.
func (x *exchange) releaseLease() {
	if x.lease != nil {
		x.lease.release()
		x.lease = nil
	}
}

// mapsPlan reports whether the route gives plan budgets of its own: a
// plan it does not map is no part of a pseudonym on it.
func (r *route) mapsPlan(plan string) bool {
	_, ok := r.planLimits[plan]
	return ok
}

// limitsFor is what limits a subject on plan on the route: the plan's
// limits when the route maps it, else the route's own (nil: none).
func (r *route) limitsFor(plan string) *limits {
	if pl, ok := r.planLimits[plan]; ok && plan != "" {
		return pl
	}
	return r.limits
}

// limited reports whether any subject of the route is limited.
func (r *route) limited() bool { return r.limits != nil || len(r.planLimits) > 0 }

// shadowDenied records the would-be denials of the shadow policies named:
// the request goes on, logged as shadow_denied with their names.
func (h *Handler) shadowDenied(rt *route, names []string, x *exchange) {
	x.outcome = "shadow_denied"
	x.shadowDenied = strings.Join(names, ",")
	if h.opts.Metrics != nil {
		for _, n := range names {
			h.opts.Metrics.ShadowDenials.WithLabelValues(rt.OperationID, n).Inc()
		}
	}
}

// evaluationIDs hands out IDs that are unique across gateway instances (a
// random prefix per process) without a system call per request.
type evaluationIDs struct {
	prefix string
	n      atomic.Uint64
}

func newEvaluationIDs() evaluationIDs {
	var b [12]byte
	rand.Read(b[:])
	return evaluationIDs{prefix: hex.EncodeToString(b[:]) + "-"}
}

func (e *evaluationIDs) next() string {
	var buf [48]byte
	b := append(buf[:0], e.prefix...)
	b = strconv.AppendUint(b, e.n.Add(1), 36)
	return string(b)
}
