package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// penaltyView is a penalty in force as the admin API shows it: the
// pseudonym, never the identity.
type penaltyView struct {
	Route      string    `json:"route"`
	Policy     string    `json:"policy"`
	Pseudonym  string    `json:"pseudonym"`
	Start      time.Time `json:"start"`
	Until      time.Time `json:"until"`
	RetryAfter int64     `json:"retry_after"` // whole seconds left
}

type penaltiesView struct {
	Penalties []penaltyView `json:"penalties"`
}

// adminPenalties serves /v1/penalties: GET ?route=R lists the penalties
// in force on the route as this instance knows them; DELETE
// ?route=R&subject=KIND:IDENTITY (or pseudonym=P, as GET lists it) lifts
// one, on every instance. A lift is an audit line, with the pseudonym.
func (h *Handler) adminPenalties(w http.ResponseWriter, r *http.Request, c *compiled, q url.Values) {
	if c.penalties == nil {
		writeProblem(w, problemAdminNoLimiter)
		return
	}
	routeName := q.Get("route")
	rt := c.routeNamed(routeName)
	if rt == nil {
		if routeName == "" {
			writeAdminBadQuery(w, "route is required: ?route=R.")
			return
		}
		writeProblem(w, newProblem(http.StatusNotFound, typeAdminNotFound, "No such route", "No route is named "+quoteDetail(routeName)+"."))
		return
	}
	if r.Method != http.MethodDelete {
		writeAdminJSON(w, viewPenalties(c, rt, time.Now()))
		return
	}
	pseudonym := q.Get("pseudonym")
	if (pseudonym == "") == (q.Get("subject") == "") {
		writeAdminBadQuery(w, "DELETE takes ?route=R with subject=KIND:IDENTITY or pseudonym=PSEUDONYM.")
		return
	}
	pseudonym, ok := adminPseudonym(w, q, c, pseudonym)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), adminLimitsTimeout)
	defer cancel()
	found, err := c.penalties.Lift(ctx, rt.OperationID, pseudonym)
	if err != nil {
		h.opts.Logger.LogAttrs(ctx, slog.LevelError, "admin penalty lift failed",
			slog.String("route", rt.OperationID), slog.String("pseudonym", pseudonym), errAttr(err))
		writeProblem(w, problemAdminUnavailable)
		return
	}
	if !found {
		writeProblem(w, newProblem(http.StatusNotFound, typeAdminNotFound, "No such penalty", "No penalty in force on this route has this subject."))
		return
	}
	h.opts.Logger.LogAttrs(ctx, slog.LevelInfo, "admin penalty lifted",
		slog.String("route", rt.OperationID), slog.String("pseudonym", pseudonym))
	w.WriteHeader(http.StatusNoContent)
}

// viewPenalties lists the penalties in force on rt at now, under the
// route's policies as they are now (Penalty.Ends), soonest end first.
func viewPenalties(c *compiled, rt *route, now time.Time) penaltiesView {
	v := penaltiesView{Penalties: []penaltyView{}}
	for _, p := range c.penalties.List(rt.OperationID, now) {
		end := p.Ends(rt.penaltyFor(p.Policy))
		if !end.After(now) {
			continue
		}
		v.Penalties = append(v.Penalties, penaltyView{Route: p.Route, Policy: p.Policy, Pseudonym: p.Pseudonym,
			Start: p.Start.UTC(), Until: end.UTC(), RetryAfter: max(ceilSeconds(end.Sub(now)), 1)})
	}
	slices.SortFunc(v.Penalties, func(a, b penaltyView) int {
		if c := a.Until.Compare(b.Until); c != 0 {
			return c
		}
		return strings.Compare(a.Pseudonym, b.Pseudonym)
	})
	return v
}

// routeNamed is the route of operation ID name, or nil.
func (c *compiled) routeNamed(name string) *route {
	for _, rt := range c.routes {
		if rt.OperationID == name {
			return rt
		}
	}
	return nil
}
