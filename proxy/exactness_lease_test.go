package proxy_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
	"github.com/edgegate/gateway/proxy"
)

// TestLeasedExactnessAcrossFourGatewaysSharingRedis runs the exactness
// checker over a fixed window with a lease of budget: 64 clients send to
// four gateways as fast as they can, each gateway admitting from its own
// lease of the shared window. No window admits more than the limit, and a
// window that denies has admitted at least the limit less what the three
// other gateways' leases may hold unused, 3 × (lease − 1); the leases
// cost Redis far fewer calls than requests, and the upstream saw exactly
// the admitted ones.
func TestLeasedExactnessAcrossFourGatewaysSharingRedis(t *testing.T) {
	const (
		instances = 4
		clients   = 64
		limit     = 40
		lease     = 5
		window    = time.Second
		run       = 3 * time.Second
	)
	for _, c := range standaloneAndCluster(nil) {
		t.Run(c.name, func(t *testing.T) {
			opts, servers := c.backend(t)
			up := newUpstream(t)
			p := redisPolicy(limitertest.FixedWindow(limit, window), "hot-"+limitertest.Subject()[3:11])
			p.Lease = lease
			var gateways []*gateway
			for range instances {
				gateways = append(gateways, newGateway(t, setup{
					routes:  []proxy.Route{route("orders.read", "/orders", up, t, p)},
					limiter: redistest.NewLimiter(t, opts),
				}))
			}
			offset := measureOffset(t, servers...)
			callsBefore := scriptCalls(t, servers)
			started := time.Now()
			l := startLoad(t, gateways, clients, nil)
			time.Sleep(run)
			stopped := time.Now()
			history := l.finish(t)
			calls := scriptCalls(t, servers) - callsBefore
			offset = offset.hull(measureOffset(t, servers...))

			e := exactness{limit: limit, window: window, offset: offset, denialSlack: rememberedDenialSlack,
				earlyDenial: (instances - 1) * (lease/2 + lease)}
			tallies := e.verify(t, history)
			n := statusCounts(history)
			if up.count() != n[http.StatusOK] {
				t.Errorf("the upstream saw %d requests, the clients %d 200s", up.count(), n[http.StatusOK])
			}
			denying := 0
			for _, tl := range tallies {
				if tl.denied > 0 {
					denying++
				}
			}
			if denying == 0 {
				t.Error("no window denied: the clients never met the limit")
			}
			// The decided requests, less those a gateway answered from its
			// memory of a denial: about one call per lease for the others.
			if decided := n[http.StatusOK] + n[http.StatusTooManyRequests]; calls*2 > decided {
				t.Errorf("%d script calls for %d decided requests: the leases were not used", calls, decided)
			}
			t.Logf("%d requests in %v: %d admitted, %d denied (429), %d unknown (503), %d script calls; clock offset [%v, %v]",
				len(history), stopped.Sub(started).Round(time.Millisecond), n[200], n[429], n[503], calls, offset.min, offset.max)
			for _, tl := range tallies {
				t.Logf("%s %v", tl.subject, tl)
			}
		})
	}
}

// scriptCalls is the EVALSHA calls the servers have run, from INFO
// commandstats.
func scriptCalls(t *testing.T, servers []*redis.Client) int {
	t.Helper()
	total := 0
	for _, s := range servers {
		info, err := s.Info(context.Background(), "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(info, "\n") {
			rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:calls=")
			if !ok {
				continue
			}
			n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			if err != nil {
				t.Fatal(err)
			}
			total += n
		}
	}
	return total
}
