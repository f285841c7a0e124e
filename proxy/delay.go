package proxy

import (
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgegate/gateway/limiter"
)

// Delay instead of refusal: a route whose policies have max_delay asks
// the limiter as a caller that can hold a request (limiter.Request's
// MayDelay) while this instance holds fewer than Config.MaxDelayed. A
// request admitted with a delay is held, its place already taken, then
// forwarded; its client leaving first gives the place back.

// DefaultMaxDelayed is Config.MaxDelayed's default.
const DefaultMaxDelayed = 1024

// heldRequests counts the requests this instance holds now, across
// reloads: a place is taken before a decision that may delay, and kept
// only while the request is held.
type heldRequests struct{ n atomic.Int64 }

// take takes a place if fewer than limit are taken.
func (h *heldRequests) take(limit int) bool {
	if h.n.Add(1) > int64(limit) {
		h.n.Add(-1)
		return false
	}
	return true
}

func (h *heldRequests) put() { h.n.Add(-1) }

// bindDelayHistograms binds each policy of l with max_delay to its series
// of gateway_limiter_delay_seconds for route.
func (l *limits) bindDelayHistograms(m *Metrics, route string) {
	if m == nil || !l.delays {
		return
	}
	l.delayObservers = make([]prometheus.Observer, len(l.policies))
	for i, p := range l.policies {
		if p.MaxDelay > 0 && !p.Shadow {
			l.delayObservers[i] = m.Delays.WithLabelValues(route, p.Name)
		}
	}
}

// hold keeps the request r, decided as o, for held before it goes on,
// and reports whether it does: false when its client left first, whose
// place is then given back and which is logged as client_closed with the
// delay it had. Each enforced policy's delay is observed.
func (h *Handler) hold(r *http.Request, l *limits, o limiter.Evaluated, held time.Duration, x *exchange) bool {
	x.outcome, x.delay = "delayed", held
	for i, obs := range l.delayObservers {
		if d := o.PolicyDecision(i).Delay(); obs != nil && d > 0 {
			obs.Observe(d.Seconds())
		}
	}
	t := time.NewTimer(held)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		o.Admitted().GiveBack()
		x.outcome = "client_closed"
		return false
	}
}

// shadowDelays names the shadow policies that would have delayed an
// admitted request, and the longest of their delays.
func (l *limits) shadowDelays(o limiter.Evaluated) (string, time.Duration) {
	var names []string
	var longest time.Duration
	for i, p := range l.policies {
		if d := o.PolicyDecision(i).Delay(); p.Shadow && d > 0 {
			names = append(names, p.Name)
			longest = max(longest, d)
		}
	}
	return strings.Join(names, ","), longest
}

// afterHold is o as it stands once the request was held for held: every
// policy's reset that much closer, so that the headers of the response
// sent then count from then.
func afterHold(o limiter.Evaluated, held time.Duration) limiter.Evaluated {
	o.ResetAfter = max(o.ResetAfter-held, 0)
	for i := range o.Policies {
		o.Policies[i].ResetAfter = max(o.Policies[i].ResetAfter-held, 0)
	}
	return o
}
