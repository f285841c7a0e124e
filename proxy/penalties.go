package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/edgegate/gateway/limiter"
)

// The penalty box: a subject that a policy with a penalty refused is
// refused on the route for the penalty's length, before the limiter is
// asked (429, problem type abnormal-usage-detected, Retry-After the
// penalty left). The limiter keeps the penalties (limiter.Penalties):
// this instance's at once, and on Redis every instance's within a second.

const typeAbnormalUsage = "https://iana.org/assignments/http-problem-types#abnormal-usage-detected"

var problemPenalized = newProblem(http.StatusTooManyRequests, typeAbnormalUsage, "Abnormal usage detected",
	"A policy of this route refused this client, which is refused on the route until its penalty ends. Retry after the time given in Retry-After.")

// penaltiesOf is the penalties lim keeps, or nil.
func penaltiesOf(lim Limiter) limiter.Penalties {
	if b, ok := lim.(interface{ Penalties() limiter.Penalties }); ok {
		return b.Penalties()
	}
	return nil
}

// penaltyFor is the penalty the route's enforced policy named policy
// gives now (its own, or a plan's), 0 when none does: a reload that
// removes a policy's penalty lifts the penalties it gave.
func (r *route) penaltyFor(policy string) time.Duration {
	var d time.Duration
	find := func(ps []*limiter.Policy) {
		for _, p := range ps {
			if p.Name == policy && !p.Shadow {
				d = max(d, p.Penalty)
			}
		}
	}
	find(r.Policies)
	for _, ps := range r.Plans {
		find(ps)
	}
	return d
}

// penalized answers a request whose subject is in the penalty box, and
// reports whether it did.
func (h *Handler) penalized(w http.ResponseWriter, c *compiled, rt *route, pseudonym string, x *exchange) bool {
	left := c.penaltyLeft(rt, pseudonym)
	if left <= 0 {
		return false
	}
	answerPenalized(w, x, left)
	return true
}

// answerPenalized answers a request whose subject is in the penalty box
// for left more.
func answerPenalized(w http.ResponseWriter, x *exchange, left time.Duration) {
	x.outcome = "penalized"
	w.Header()["Retry-After"] = []string{strconv.FormatInt(max(ceilSeconds(left), 1), 10)}
	writeProblem(w, problemPenalized)
}

// penaltyLeft is what is left of the subject's penalty on the route; 0
// when it is in no penalty box.
func (c *compiled) penaltyLeft(rt *route, pseudonym string) time.Duration {
	if c.penalties == nil || !rt.penalizes {
		return 0
	}
	now := time.Now()
	p, ok := c.penalties.Find(rt.OperationID, pseudonym, now)
	if !ok {
		return 0
	}
	return max(p.Ends(rt.penaltyFor(p.Policy)).Sub(now), 0)
}

// impose puts the subject of a request o refused in the penalty box, as
// imposePenalty does, and answers the request as penalized; it reports
// whether it did.
func (h *Handler) impose(ctx context.Context, w http.ResponseWriter, c *compiled, rt *route, l *limits, pseudonym string, o limiter.Evaluated, x *exchange) bool {
	penalty := h.imposePenalty(ctx, c, rt, l, pseudonym, o)
	if penalty == 0 {
		return false
	}
	answerPenalized(w, x, penalty)
	return true
}

// imposePenalty puts the subject o refused in the penalty box, when an
// enforced policy that refused it has a penalty (the longest of them),
// and is that penalty; 0 when none has.
func (h *Handler) imposePenalty(ctx context.Context, c *compiled, rt *route, l *limits, pseudonym string, o limiter.Evaluated) time.Duration {
	if c.penalties == nil || !rt.penalizes {
		return 0
	}
	var worst *limiter.Policy
	for i, p := range l.policies {
		if !p.Shadow && p.Penalty > 0 && !o.PolicyDecision(i).Allowed && (worst == nil || p.Penalty > worst.Penalty) {
			worst = p
		}
	}
	if worst == nil {
		return 0
	}
	now := time.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.deadline)
	defer cancel()
	err := c.penalties.Impose(ctx, limiter.Penalty{Route: rt.OperationID, Policy: worst.Name, Pseudonym: pseudonym,
		Start: now, Until: now.Add(worst.Penalty)})
	if err != nil {
		// This instance refuses the subject all the same; the others
		// may not learn of it.
		h.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "penalty not shared",
			slog.String("route", rt.OperationID), slog.String("policy", worst.Name), errAttr(err))
	}
	if h.opts.Metrics != nil {
		h.opts.Metrics.Penalties.WithLabelValues(rt.OperationID, worst.Name).Inc()
	}
	return worst.Penalty
}

// hasPenalty reports whether an enforced policy of the route or of one
// of its plans has a penalty.
func (r *route) hasPenalty() bool {
	has := func(ps []*limiter.Policy) bool {
		return slices.ContainsFunc(ps, func(p *limiter.Policy) bool { return p.Penalty > 0 && !p.Shadow })
	}
	if has(r.Policies) {
		return true
	}
	for _, ps := range r.Plans {
		if has(ps) {
			return true
		}
	}
	return false
}
