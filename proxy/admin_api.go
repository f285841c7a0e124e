package proxy

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/edgegate/gateway/limiter"
)

// MinBearerTokenBytes is the shortest token the admin API and the rate
// limit service take: a bearer token is their only guard.
const MinBearerTokenBytes = 16

// CheckBearerToken reports whether t may be Config.AdminToken or
// Config.RLSToken.
func CheckBearerToken(t string) error {
	if t != "" && len(t) < MinBearerTokenBytes {
		return fmt.Errorf("the token is %d bytes; at least %d are needed", len(t), MinBearerTokenBytes)
	}
	return nil
}

// newBearerToken is t checked and digested; nil when t is empty.
func newBearerToken(t string) (*bearerToken, error) {
	if err := CheckBearerToken(t); err != nil || t == "" {
		return nil, err
	}
	b := bearerToken(sha256.Sum256([]byte(t)))
	return &b, nil
}

// adminRequestBytes bounds what the admin API reads of a request body
// (PUT /v1/overrides takes one).
const adminRequestBytes = 4 << 10

const (
	typeAdminNotFound     = "urn:edge-gateway:problem:admin-not-found"
	typeAdminUnauthorized = "urn:edge-gateway:problem:admin-unauthorized"
)

var (
	problemAdminNotFound     = newProblem(http.StatusNotFound, typeAdminNotFound, "Not found", "No admin API call has this path, or the admin API is off (no admin block).")
	problemAdminUnauthorized = newProblem(http.StatusUnauthorized, typeAdminUnauthorized, "Unauthorized", "The admin API needs the configured token as a bearer token.")
	problemAdminMethod       = newProblem(http.StatusMethodNotAllowed, typeMethodNotAllowed, "Method not allowed", "This admin API call does not take this method.")
	headerAdminChallenge     = []string{`Bearer realm="admin"`}
)

// bearerToken is the SHA-256 of the configured token: comparing digests
// takes the same time whatever the length of what a caller sends.
type bearerToken [sha256.Size]byte

func (t *bearerToken) admits(authorization string) bool {
	scheme, token, ok := strings.Cut(authorization, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	return subtle.ConstantTimeCompare(got[:], t[:]) == 1
}

// AdminAPI serves the admin API under /v1/, for the admin listener only.
// Without Config.AdminToken every call answers 404, as if it were not
// there; with it, a call without that token as a bearer token answers
// 401. Errors are RFC 9457 problem bodies. The token is the configuration
// of the moment: a reload changes it.
func (h *Handler) AdminAPI() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := h.current.Load()
		if c == nil || c.adminToken == nil {
			writeProblem(w, problemAdminNotFound)
			return
		}
		if !c.adminToken.admits(r.Header.Get("Authorization")) {
			w.Header()["Www-Authenticate"] = headerAdminChallenge
			writeProblem(w, problemAdminUnauthorized)
			return
		}
		q, ok := adminQuery(w, r)
		if !ok {
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, adminRequestBytes)
		switch r.URL.Path {
		case "/v1/routes":
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				w.Header()["Allow"] = []string{"GET, HEAD"}
				writeProblem(w, problemAdminMethod)
				return
			}
			writeAdminJSON(w, adminRoutes(c.routes))
		case "/v1/limits":
			switch r.Method {
			case http.MethodGet, http.MethodHead, http.MethodDelete:
				h.adminLimits(w, r, c, q)
			default:
				w.Header()["Allow"] = []string{"GET, HEAD, DELETE"}
				writeProblem(w, problemAdminMethod)
			}
		case "/v1/penalties":
			switch r.Method {
			case http.MethodGet, http.MethodHead, http.MethodDelete:
				h.adminPenalties(w, r, c, q)
			default:
				w.Header()["Allow"] = []string{"GET, HEAD, DELETE"}
				writeProblem(w, problemAdminMethod)
			}
		case "/v1/overrides":
			switch r.Method {
			case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete:
				h.adminOverrides(w, r, c, q)
			default:
				w.Header()["Allow"] = []string{"GET, HEAD, PUT, DELETE"}
				writeProblem(w, problemAdminMethod)
			}
		default:
			writeProblem(w, problemAdminNotFound)
		}
	})
}

// adminQuery is the query of an admin call, every parameter at most once:
// a query that does not parse, or names a parameter twice, is ambiguous
// (which subject would a DELETE reset?) and answered 400, and ok is false.
func adminQuery(w http.ResponseWriter, r *http.Request) (q url.Values, ok bool) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeAdminBadQuery(w, "The query does not parse.")
		return nil, false
	}
	for name, values := range q {
		if len(values) > 1 {
			writeAdminBadQuery(w, "The query names "+quoteDetail(name)+" more than once.")
			return nil, false
		}
	}
	return q, true
}

func writeAdminJSON(w http.ResponseWriter, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Cache-Control"] = headerNoStore
	w.Write(append(b, '\n'))
}

// routesView is GET /v1/routes: the routes of the configuration in force,
// in file order.
type routesView struct {
	Routes []routeView `json:"routes"`
}

type routeView struct {
	Name     string                  `json:"name"`
	Host     string                  `json:"host,omitempty"`
	Path     string                  `json:"path"`
	Methods  []string                `json:"methods,omitempty"`
	Upstream string                  `json:"upstream,omitempty"`
	Pool     string                  `json:"pool,omitempty"`
	Subject  []string                `json:"subject"`
	Cost     int64                   `json:"cost,omitempty"`
	Policies []policyView            `json:"policies"`
	Plans    map[string][]policyView `json:"plans,omitempty"`
}

type policyView struct {
	Name         string `json:"name"`
	Algorithm    string `json:"algorithm"`
	Revision     int64  `json:"revision"`
	Limit        int64  `json:"limit,omitempty"`
	WindowMillis int64  `json:"window_ms,omitempty"`
	Capacity     int64  `json:"capacity,omitempty"`
	RefillTokens int64  `json:"refill_tokens,omitempty"`
	RefillMillis int64  `json:"refill_period_ms,omitempty"`
	Mode         string `json:"mode"`
}

func adminRoutes(routes []*route) routesView {
	v := routesView{Routes: make([]routeView, 0, len(routes))}
	for _, r := range routes {
		rv := routeView{Name: r.OperationID, Host: r.Host, Path: r.Path, Methods: r.Methods, Upstream: r.Upstream, Pool: r.Pool, Cost: r.Cost,
			Subject: make([]string, len(r.Subject)), Policies: policyViews(r.Policies)}
		for i, k := range r.Subject {
			rv.Subject[i] = k.String()
		}
		for plan, ps := range r.Plans {
			if rv.Plans == nil {
				rv.Plans = map[string][]policyView{}
			}
			rv.Plans[plan] = policyViews(ps)
		}
		v.Routes = append(v.Routes, rv)
	}
	return v
}

func policyViews(ps []*limiter.Policy) []policyView {
	out := make([]policyView, 0, len(ps))
	for _, p := range ps {
		out = append(out, policyView{Name: p.Name, Algorithm: p.Algorithm.String(), Revision: p.Revision,
			Limit: p.Limit, WindowMillis: p.Window.Milliseconds(), Capacity: p.Capacity,
			RefillTokens: p.RefillTokens, RefillMillis: p.RefillPeriod.Milliseconds(), Mode: policyMode(p)})
	}
	return out
}

// policyMode is how the admin API names whether p refuses.
func policyMode(p *limiter.Policy) string {
	if p.Shadow {
		return "shadow"
	}
	return "enforce"
}
