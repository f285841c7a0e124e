package proxy_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
	"github.com/edgegate/gateway/proxy"
)

// TestDelayedExactnessAcrossFourGatewaysSharingRedis runs the exactness
// checker over a fixed window with max_delay: 48 clients send to four
// gateways as fast as they can, most of their requests held into the
// next window or refused. A held request was decided in one window and
// counted in the next, where it goes upstream; its client's span covers
// both, so the checker places it in either, and no placement may put
// more than the limit in a window. The admitted total over the run stays
// within the limit times the windows it spanned, some requests were held,
// and the upstream saw exactly the admitted ones.
func TestDelayedExactnessAcrossFourGatewaysSharingRedis(t *testing.T) {
	const (
		instances = 4
		clients   = 48
		limit     = 10
		window    = time.Second
		maxDelay  = 500 * time.Millisecond
		run       = 3 * time.Second
	)
	for _, c := range standaloneAndCluster(nil) {
		t.Run(c.name, func(t *testing.T) {
			opts, servers := c.backend(t)
			up := newUpstream(t)
			p := redisPolicy(limitertest.FixedWindow(limit, window), "smooth-"+limitertest.Subject()[3:11])
			p.MaxDelay = maxDelay
			var gateways []*gateway
			var metrics []*proxy.Metrics
			for range instances {
				m := proxy.NewMetrics(prometheus.NewRegistry())
				gateways = append(gateways, newGateway(t, setup{
					routes:  []proxy.Route{route("orders.read", "/orders", up, t, p)},
					limiter: redistest.NewLimiter(t, opts),
					metrics: m,
				}))
				metrics = append(metrics, m)
			}
			offset := measureOffset(t, servers...)
			started := time.Now()
			l := startLoad(t, gateways, clients, nil)
			time.Sleep(run)
			stopped := time.Now()
			history := l.finish(t)
			offset = offset.hull(measureOffset(t, servers...))

			e := exactness{limit: limit, window: window, offset: offset, denialSlack: rememberedDenialSlack}
			tallies := e.verify(t, history)
			n := statusCounts(history)
			first, last := span(history)
			spanned := e.windowOf(last.Add(offset.max)) - e.windowOf(first.Add(offset.min)) + 1
			if int64(n[http.StatusOK]) > limit*spanned {
				t.Errorf("%d admitted over %d windows of %d", n[http.StatusOK], spanned, limit)
			}
			if up.count() != n[http.StatusOK] {
				t.Errorf("the upstream saw %d requests, the clients %d 200s", up.count(), n[http.StatusOK])
			}
			var held uint64
			for _, m := range metrics {
				held += histogramCount(t, m.Delays.WithLabelValues("orders.read", p.Name))
			}
			if held == 0 || n[http.StatusTooManyRequests] == 0 {
				t.Errorf("%d requests held and %d refused: the clients never went past the limit", held, n[http.StatusTooManyRequests])
			}
			t.Logf("%d requests in %v: %d admitted (%d of them held) in %d windows, %d denied (429), %d unknown (503); clock offset [%v, %v]",
				len(history), stopped.Sub(started).Round(time.Millisecond), n[200], held, spanned, n[429], n[503], offset.min, offset.max)
			for _, tl := range tallies {
				t.Logf("%s %v", tl.subject, tl)
			}
		})
	}
}

// TestDelayedBucketAdmitsNoMoreThanItRefills: 48 clients send to four
// gateways sharing Redis as fast as they can through a token bucket with
// max_delay. Each admitted request went upstream no earlier than its
// token was due, so by the last answer the clients had no more 200s than
// the capacity and the refills since the first request; the held ones
// among them, and the upstream saw exactly the admitted.
func TestDelayedBucketAdmitsNoMoreThanItRefills(t *testing.T) {
	const (
		instances = 4
		clients   = 48
		capacity  = 5
		period    = time.Second
		maxDelay  = time.Second
		run       = 3 * time.Second
	)
	s := redistest.Start(t)
	up := newUpstream(t)
	p := redisPolicy(limitertest.TokenBucket(capacity, capacity, period), "smooth-"+limitertest.Subject()[3:11])
	p.MaxDelay = maxDelay
	var gateways []*gateway
	var metrics []*proxy.Metrics
	for range instances {
		m := proxy.NewMetrics(prometheus.NewRegistry())
		gateways = append(gateways, newGateway(t, setup{
			routes:  []proxy.Route{route("orders.read", "/orders", up, t, p)},
			limiter: redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}}),
			metrics: m,
		}))
		metrics = append(metrics, m)
	}
	l := startLoad(t, gateways, clients, nil)
	time.Sleep(run)
	history := l.finish(t)
	n := statusCounts(history)
	first, last := span(history)
	// Redis counts whole milliseconds: a token may be due up to one
	// before the local clock says.
	refills := int((last.Sub(first) + time.Millisecond) / period)
	if most := capacity * (1 + refills); n[http.StatusOK] > most {
		t.Errorf("%d admitted in %s: more than the capacity and %d refills of %d allow (%d)", n[http.StatusOK], last.Sub(first), refills, capacity, most)
	}
	if up.count() != n[http.StatusOK] {
		t.Errorf("the upstream saw %d requests, the clients %d 200s", up.count(), n[http.StatusOK])
	}
	var held uint64
	for _, m := range metrics {
		held += histogramCount(t, m.Delays.WithLabelValues("orders.read", p.Name))
	}
	if held == 0 || n[http.StatusTooManyRequests] == 0 || n[http.StatusOK] < capacity*refills {
		t.Errorf("%d admitted, %d of them held, %d refused: want the bucket spent, held and refusing", n[http.StatusOK], held, n[http.StatusTooManyRequests])
	}
	t.Logf("%d requests in %s: %d admitted (%d of them held), %d denied (429), %d unknown (503)",
		len(history), last.Sub(first).Round(time.Millisecond), n[200], held, n[429], n[503])
}
