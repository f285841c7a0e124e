package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/subject"
)

// limitsBackend is what /v1/limits asks of the limiter: every backend
// limiter.Open returns has it.
type limitsBackend interface {
	Peek(ctx context.Context, req limiter.Request) limiter.Outcome
	Reset(ctx context.Context, req limiter.Request) error
}

// adminLimitsTimeout bounds one /v1/limits call's work on the backend.
const adminLimitsTimeout = 5 * time.Second

const (
	typeAdminBadQuery    = "urn:edge-gateway:problem:admin-bad-query"
	typeAdminUnavailable = "urn:edge-gateway:problem:admin-limiter-unavailable"
)

var (
	problemAdminNoLimiter = newProblem(http.StatusNotImplemented, typeAdminUnavailable, "Not implemented",
		"This gateway's limiter cannot read or reset a subject's state.")
	problemAdminUnavailable = newProblem(http.StatusServiceUnavailable, typeAdminUnavailable, "Limiter unavailable",
		"The limiter did not answer; nothing can be told of the subject's state. Try again.")
)

// limitsView is GET /v1/limits: a subject's state for each of the
// policies that limit it on a route, and DELETE's answer, the same
// policies reset.
type limitsView struct {
	Route       string `json:"route"`
	SubjectKind string `json:"subject_kind"`
	// Pseudonym is the subject as logs and Redis know it.
	Pseudonym string `json:"pseudonym"`
	// Plan is the plan whose policies apply: empty for the route's own.
	Plan     string            `json:"plan,omitempty"`
	Reset    bool              `json:"reset,omitempty"`
	Policies []policyStateView `json:"policies"`
}

type policyStateView struct {
	Policy       string `json:"policy"`
	Algorithm    string `json:"algorithm"`
	Mode         string `json:"mode"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMS int64  `json:"reset_after_ms"`
}

// adminSubject reads ?route=R&subject=KIND:IDENTITY[&plan=P]: the route,
// and the subject resolved by the request path's own rules
// (subject.Resolver.Named) to its pseudonym there. A query it cannot
// read is answered (400, or 404 for no such route) and ok is false.
func adminSubject(w http.ResponseWriter, q url.Values, c *compiled) (rt *route, s subject.Subject, ok bool) {
	routeName, named, plan := q.Get("route"), q.Get("subject"), q.Get("plan")
	if routeName == "" || named == "" {
		writeAdminBadQuery(w, "route and subject are required: ?route=R&subject=KIND:IDENTITY[&plan=P]")
		return nil, s, false
	}
	for _, candidate := range c.routes {
		if candidate.OperationID == routeName {
			rt = candidate
			break
		}
	}
	if rt == nil {
		writeProblem(w, newProblem(http.StatusNotFound, typeAdminNotFound, "No such route", "No route is named "+quoteDetail(routeName)+"."))
		return nil, s, false
	}
	kind, identity, err := subject.ParseNamed(named)
	if err != nil {
		writeAdminBadQuery(w, "subject is KIND:IDENTITY; "+err.Error())
		return nil, s, false
	}
	if s, err = c.resolver.Named(kind, identity, plan, rt.query); err != nil {
		writeAdminBadQuery(w, err.Error())
		return nil, s, false
	}
	return rt, s, true
}

// adminLimits serves GET and DELETE /v1/limits?route=R&subject=KIND:IDENTITY[&plan=P].
// The subject is resolved by the request path's own rules
// (subject.Resolver.Named) to its pseudonym on the route, and the policies
// are those the request path would apply to it (route.limitsFor). The raw
// identity is used for nothing else: the answer and the audit line carry
// the pseudonym.
func (h *Handler) adminLimits(w http.ResponseWriter, r *http.Request, c *compiled, q url.Values) {
	rt, s, ok := adminSubject(w, q, c)
	if !ok {
		return
	}
	view := limitsView{Route: rt.OperationID, SubjectKind: s.Kind.String(), Pseudonym: s.Pseudonym, Policies: []policyStateView{}}
	l := rt.limitsFor(s.Plan)
	if l != nil && l != rt.limits {
		view.Plan = s.Plan
	}
	if l == nil {
		// Only plans limit the route, and not this subject's.
		writeAdminJSON(w, view)
		return
	}
	backend, ok := c.limiter.(limitsBackend)
	if !ok {
		writeProblem(w, problemAdminNoLimiter)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), adminLimitsTimeout)
	defer cancel()
	req := limiter.Request{Policies: l.set, Subject: s.Pseudonym}
	if r.Method == http.MethodDelete {
		if err := backend.Reset(ctx, req); err != nil {
			h.opts.Logger.LogAttrs(ctx, slog.LevelError, "admin reset failed",
				slog.String("route", rt.OperationID), slog.String("pseudonym", s.Pseudonym), errAttr(err))
			writeProblem(w, problemAdminUnavailable)
			return
		}
		h.opts.Logger.LogAttrs(ctx, slog.LevelInfo, "admin reset",
			slog.String("route", rt.OperationID), slog.String("subject_kind", s.Kind.String()),
			slog.String("pseudonym", s.Pseudonym), slog.String("plan", view.Plan))
		view.Reset = true
	}
	o := backend.Peek(ctx, req)
	e, ok := o.(limiter.Evaluated)
	if !ok {
		writeProblem(w, problemAdminUnavailable)
		return
	}
	for i, p := range l.policies {
		d := e.PolicyDecision(i)
		view.Policies = append(view.Policies, policyStateView{Policy: p.Name, Algorithm: p.Algorithm.String(), Mode: policyMode(p),
			Limit: d.Limit, Remaining: max(d.Remaining, 0), ResetAfterMS: d.ResetAfter.Milliseconds()})
	}
	writeAdminJSON(w, view)
}

func writeAdminBadQuery(w http.ResponseWriter, detail string) {
	writeProblem(w, newProblem(http.StatusBadRequest, typeAdminBadQuery, "Bad query", detail))
}

// quoteDetail quotes s for a problem's detail, at most 128 bytes of it.
func quoteDetail(s string) string {
	if len(s) > 128 {
		s = s[:128]
	}
	return `"` + strings.ToValidUTF8(s, "?") + `"`
}

// adminPseudonym is the pseudonym a DELETE names: given as listed, or
// resolved from ?subject=KIND:IDENTITY (adminSubject, which answers a
// query it cannot read; ok is then false).
func adminPseudonym(w http.ResponseWriter, q url.Values, c *compiled, pseudonym string) (string, bool) {
	if pseudonym != "" {
		return pseudonym, true
	}
	_, s, ok := adminSubject(w, q, c)
	return s.Pseudonym, ok
}
