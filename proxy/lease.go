package proxy

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgegate/gateway/limiter"
)

// lease is what a request admitted under a concurrency policy holds until
// its response is complete (the last byte written, the client gone, the
// upstream failed; an upgraded tunnel until it closes): its leases in the
// limiter, renewed every third of the shortest lease TTL while it lasts,
// and its share of gateway_limiter_leases_held.
type lease struct {
	limiter Limiter
	req     limiter.Request
	decided limiter.Evaluated
	limits  *limits
	every   time.Duration

	mu       sync.Mutex
	timer    *time.Timer
	released bool
}

// holdLease starts holding the leases req took, decided as e.
func holdLease(lim Limiter, req limiter.Request, e limiter.Evaluated, l *limits) *lease {
	ls := &lease{limiter: lim, req: req, decided: e, limits: l, every: l.leaseTTL / 3}
	for _, g := range l.leasesHeld {
		if g != nil {
			g.Add(float64(req.Cost))
		}
	}
	ls.mu.Lock()
	ls.timer = time.AfterFunc(ls.every, ls.renew)
	ls.mu.Unlock()
	return ls
}

// renew runs on the timer, off the request's path.
func (ls *lease) renew() {
	ls.limiter.Renew(context.Background(), ls.req, ls.decided)
	ls.mu.Lock()
	if !ls.released {
		ls.timer.Reset(ls.every)
	}
	ls.mu.Unlock()
}

// release gives the leases back; the limiter never blocks on it.
func (ls *lease) release() {
	ls.mu.Lock()
	ls.released = true
	ls.timer.Stop()
	ls.mu.Unlock()
	ls.limiter.Release(ls.req, ls.decided)
	for _, g := range ls.limits.leasesHeld {
		if g != nil {
			g.Sub(float64(ls.req.Cost))
		}
	}
}

// bindLeaseGauges binds each policy of l that holds leases to its series
// of gateway_limiter_leases_held for route.
func (l *limits) bindLeaseGauges(m *Metrics, route string) {
	if m == nil || !l.leases {
		return
	}
	l.leasesHeld = make([]prometheus.Gauge, len(l.policies))
	for i, p := range l.policies {
		if p.HoldsLeases() {
			l.leasesHeld[i] = m.LeasesHeld.WithLabelValues(route, p.Name)
		}
	}
}
