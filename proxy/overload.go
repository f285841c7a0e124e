package proxy

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgegate/gateway/overload"
)

// overloadGate is a pool's overload block compiled: the controller that
// admits requests to the pool, and what a request refused by it is told.
type overloadGate struct {
	controller *overload.Controller
	// retryAfter is the Retry-After of a shed request: the queue's
	// timeout, in whole seconds, at least 1; by then the queue has turned
	// over.
	retryAfter []string
	shed       [len(overload.Priorities)]prometheus.Counter // nil without metrics
	// retune is the block's numbers for a kept controller, applied by
	// commit once the configuration is in force (nil: a new controller).
	retune *overload.Options
}

// newOverloadGate compiles p's overload block. A reload that keeps the
// block (kept is the old pool's) keeps its controller, retuned once the
// reload is in force (commit): its requests in flight, its queue and its
// learnt limit stay, so nobody waiting is lost or admitted twice.
func newOverloadGate(p Pool, kept *overloadGate, m *Metrics) (*overloadGate, error) {
	o := *p.Overload
	g := &overloadGate{}
	if kept != nil {
		if err := o.Validate(); err != nil {
			return nil, err
		}
		g.controller, g.retune = kept.controller, &o
	} else {
		c, err := overload.New(o)
		if err != nil {
			return nil, err
		}
		g.controller = c
	}
	g.retryAfter = []string{strconv.FormatInt(max(ceilSeconds(defaultIfZero(o.QueueTimeout, overload.DefaultQueueTimeout)), 1), 10)}
	if m != nil {
		for i, pr := range overload.Priorities {
			g.shed[i] = m.UpstreamShed.WithLabelValues(p.Name, pr.String())
		}
	}
	return g, nil
}

// commit retunes a kept controller with the numbers of the configuration
// now in force; a reload refused after its pools were built leaves the
// controller as it was.
func (g *overloadGate) commit() {
	if g == nil || g.retune == nil {
		return
	}
	// (Validated by newOverloadGate: Reconfigure cannot refuse them.)
	g.controller.Reconfigure(*g.retune)
	g.retune = nil
}

// priorityFor is the priority of a request on the route from a subject on
// plan ("" for none).
func (r *route) priorityFor(plan string) overload.Priority {
	if p, ok := r.PlanPriority[plan]; ok && plan != "" {
		return p
	}
	return r.Priority
}

// admit waits for a slot of the route's pool, and answers the request
// when it gets none: 503 when it is shed or waited too long, 499 when
// its client left. It reports whether the request may be forwarded; the
// slot is then x.admission's. A pool with no target in rotation takes no
// slot: its answer is the 502 forward gives at once.
func (h *Handler) admit(w http.ResponseWriter, r *http.Request, rt *route, x *exchange) bool {
	g := rt.pool.overload
	if !rt.pool.anyInRotation() {
		return true
	}
	tenant := x.pseudonym
	if tenant == "" {
		// A route without a limit resolves no subject; its clients take
		// turns by address, pseudonymized.
		tenant = x.in.ClientSubject().Pseudonym
	}
	priority := rt.priorityFor(x.plan)
	a, result := g.controller.Admit(r.Context(), priority, tenant)
	switch result {
	case overload.Admitted:
		x.admission = a
		return true
	case overload.Left:
		x.outcome = "client_closed"
		w.WriteHeader(statusClientClosed)
		return false
	}
	// Shed, TimedOut, and anything the controller adds later.
	x.outcome = "shed"
	if c := g.shed[priority-overload.Sheddable]; c != nil {
		c.Inc()
	}
	w.Header()["Retry-After"] = g.retryAfter
	writeProblem(w, problemShed)
	return false
}

// anyInRotation reports whether a request to the pool has a target to go
// to.
func (p *pool) anyInRotation() bool {
	for _, m := range p.members {
		if m.inRotation() {
			return true
		}
	}
	return false
}
