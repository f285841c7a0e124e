package proxy

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/edgegate/gateway/limiter"
)

// overrideBody is what PUT /v1/overrides takes.
type overrideBody struct {
	Policy  string `json:"policy"`
	Limit   int64  `json:"limit"`
	Expires string `json:"expires"` // RFC 3339
}

// overrideView is an override as the admin API shows it: the pseudonym,
// never the identity. Applies is false when the configuration in force
// has no such route, or no policy of that name and revision on it: the
// override is kept and changes nothing.
type overrideView struct {
	Route       string    `json:"route"`
	Policy      string    `json:"policy"`
	SubjectKind string    `json:"subject_kind,omitempty"`
	Pseudonym   string    `json:"pseudonym"`
	Plan        string    `json:"plan,omitempty"`
	Limit       int64     `json:"limit"`
	Expires     time.Time `json:"expires"`
	Applies     bool      `json:"applies"`
}

type overridesView struct {
	Overrides []overrideView `json:"overrides"`
}

// adminOverrides serves /v1/overrides: PUT sets one subject's limit of one
// policy of a route until it expires, GET lists the overrides kept, DELETE
// removes one. Every change is an audit line, with the pseudonym.
func (h *Handler) adminOverrides(w http.ResponseWriter, r *http.Request, c *compiled, q url.Values) {
	backend, ok := c.limiter.(interface{ Overrides() limiter.Overrides })
	if !ok || backend.Overrides() == nil {
		writeProblem(w, problemAdminNoLimiter)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), adminLimitsTimeout)
	defer cancel()
	overrides := backend.Overrides()
	switch r.Method {
	case http.MethodPut:
		h.putOverride(ctx, w, r, c, q, overrides)
	case http.MethodDelete:
		h.deleteOverride(ctx, w, c, q, overrides)
	default:
		list, err := overrides.List(ctx)
		if err != nil {
			writeProblem(w, problemAdminUnavailable)
			return
		}
		view := overridesView{Overrides: []overrideView{}}
		for _, o := range list {
			view.Overrides = append(view.Overrides, viewOverride(o, c))
		}
		slices.SortFunc(view.Overrides, func(a, b overrideView) int {
			return strings.Compare(a.Route+"\x00"+a.Policy+"\x00"+a.Pseudonym, b.Route+"\x00"+b.Policy+"\x00"+b.Pseudonym)
		})
		writeAdminJSON(w, view)
	}
}

func (h *Handler) putOverride(ctx context.Context, w http.ResponseWriter, r *http.Request, c *compiled, q url.Values, overrides limiter.Overrides) {
	rt, s, ok := adminSubject(w, q, c)
	if !ok {
		return
	}
	var body overrideBody
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		writeAdminBadQuery(w, `The body is {"policy": "p", "limit": N, "expires": "RFC 3339 time"}.`)
		return
	}
	expires, err := time.Parse(time.RFC3339, body.Expires)
	if err != nil {
		writeAdminBadQuery(w, "expires is an RFC 3339 time, such as \"2026-12-06T09:00:00Z\".")
		return
	}
	l := rt.limitsFor(s.Plan)
	i := -1
	if l != nil {
		i = slices.IndexFunc(l.policies, func(p *limiter.Policy) bool { return p.Name == body.Policy })
	}
	if i < 0 {
		writeAdminBadQuery(w, "The subject's policies on route "+quoteDetail(rt.OperationID)+" have none named "+quoteDetail(body.Policy)+".")
		return
	}
	p := l.policies[i]
	plan := ""
	if l != rt.limits {
		plan = s.Plan
	}
	o := limiter.Override{Route: rt.OperationID, Policy: p.Name, Revision: p.Revision, Pseudonym: s.Pseudonym,
		SubjectKind: s.Kind.String(), Plan: plan, Limit: body.Limit, Expires: expires}
	if err := limiter.CheckOverride(o, time.Now()); err != nil {
		writeAdminBadQuery(w, err.Error()+".")
		return
	}
	if err := overrides.Set(ctx, limiter.Request{Policies: l.set, Subject: s.Pseudonym}, i, o); err != nil {
		h.opts.Logger.LogAttrs(ctx, slog.LevelError, "admin override failed",
			slog.String("route", o.Route), slog.String("policy", o.Policy), slog.String("pseudonym", o.Pseudonym), errAttr(err))
		writeProblem(w, problemAdminUnavailable)
		return
	}
	h.opts.Logger.LogAttrs(ctx, slog.LevelInfo, "admin override set",
		slog.String("route", o.Route), slog.String("policy", o.Policy), slog.String("subject_kind", o.SubjectKind),
		slog.String("pseudonym", o.Pseudonym), slog.String("plan", o.Plan), slog.Int64("limit", o.Limit),
		slog.Time("expires", o.Expires))
	writeAdminJSON(w, viewOverride(o, c))
}

// deleteOverride removes the override of ?route=R&policy=P and a subject:
// subject=KIND:IDENTITY as PUT names it, or pseudonym= as GET lists it
// (an override whose route is gone names its subject so alone).
func (h *Handler) deleteOverride(ctx context.Context, w http.ResponseWriter, c *compiled, q url.Values, overrides limiter.Overrides) {
	routeName, policy, pseudonym, ok := q.Get("route"), q.Get("policy"), q.Get("pseudonym"), false
	if policy == "" || (pseudonym == "") == (q.Get("subject") == "") || routeName == "" {
		writeAdminBadQuery(w, "DELETE takes ?route=R&policy=P with subject=KIND:IDENTITY or pseudonym=PSEUDONYM.")
		return
	}
	if pseudonym, ok = adminPseudonym(w, q, c, pseudonym); !ok {
		return
	}
	found, err := overrides.Delete(ctx, routeName, policy, pseudonym)
	if err != nil {
		h.opts.Logger.LogAttrs(ctx, slog.LevelError, "admin override delete failed",
			slog.String("route", routeName), slog.String("policy", policy), slog.String("pseudonym", pseudonym), errAttr(err))
		writeProblem(w, problemAdminUnavailable)
		return
	}
	if !found {
		writeProblem(w, newProblem(http.StatusNotFound, typeAdminNotFound, "No such override", "No override in force has this route, policy and subject."))
		return
	}
	h.opts.Logger.LogAttrs(ctx, slog.LevelInfo, "admin override deleted",
		slog.String("route", routeName), slog.String("policy", policy), slog.String("pseudonym", pseudonym))
	w.WriteHeader(http.StatusNoContent)
}

// viewOverride is o as the admin API shows it under configuration c.
func viewOverride(o limiter.Override, c *compiled) overrideView {
	v := overrideView{Route: o.Route, Policy: o.Policy, SubjectKind: o.SubjectKind, Pseudonym: o.Pseudonym, Plan: o.Plan,
		Limit: o.Limit, Expires: o.Expires.UTC()}
	for _, rt := range c.routes {
		if rt.OperationID != o.Route {
			continue
		}
		lists := [][]*limiter.Policy{rt.Policies}
		for _, ps := range rt.Plans {
			lists = append(lists, ps)
		}
		for _, ps := range lists {
			v.Applies = v.Applies || slices.ContainsFunc(ps, func(p *limiter.Policy) bool { return p.Name == o.Policy && p.Revision == o.Revision })
		}
	}
	return v
}
