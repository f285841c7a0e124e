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
	admitted *limiter.Admitted
	cost     int64
	limits   *limits
	every    time.Duration

	mu       sync.Mutex
	timer    *time.Timer
	released bool
}

// holdLease starts holding the leases a request of cost took, decided as e.
func holdLease(e limiter.Evaluated, cost int64, l *limits) *lease {
	ls := &lease{admitted: e.Admitted(), cost: cost, limits: l, every: l.leaseTTL / 3}
	for _, g := range l.leasesHeld {
		if g != nil {
			g.Add(float64(cost))
		}
	}
	ls.mu.Lock()
	ls.timer = time.AfterFunc(ls.every, ls.renew)
	ls.mu.Unlock()
	return ls
}

// renew runs on the timer, off the request's path.
func (ls *lease) renew() {
	ls.admitted.Renew(context.Background())
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
	ls.admitted.Release()
	for _, g := range ls.limits.leasesHeld {
		if g != nil {
			g.Sub(float64(ls.cost))
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
