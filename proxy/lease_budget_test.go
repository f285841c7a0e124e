package proxy_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
)

// A route whose policies take leases of budget on Redis answers as without
// them: RateLimit counts down request by request, a plan's two policies
// and a shadow one included, the request past the enforced limit is
// refused, and the shadow policy's denial refuses nothing; Redis sees a
// call per lease, not per request.
func TestRedisLeasesAnswerAsWithout(t *testing.T) {
	s := redistest.Start(t)
	up := newUpstream(t)
	leased := func(p *limiter.Policy, name string) *limiter.Policy {
		p = redisPolicy(p, name)
		p.Lease = 4
		return p
	}
	r := route("orders.read", "/orders", up, t, leased(limitertest.FixedWindow(10, time.Minute), "free"))
	r.Subject = []subject.Kind{subject.Principal, subject.ClientIP}
	shadow := leased(limitertest.FixedWindow(5, time.Minute), "trial")
	shadow.Shadow = true
	r.Plans = map[string][]*limiter.Policy{
		"partner": {leased(limitertest.FixedWindow(6, time.Minute), "per-minute"), leased(limitertest.FixedWindow(100, time.Hour), "per-hour"), shadow},
	}
	g := newGateway(t, setup{
		routes:  []proxy.Route{r},
		limiter: redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}}),
		trusted: []string{"127.0.0.0/8"},
	})
	before := scriptCalls(t, []*redis.Client{s.Client(t)})
	for i := range 7 {
		res := g.get(t, "/orders", "X-Auth-Principal", "alice", "X-Auth-Plan", "partner")
		res.Body.Close()
		want := fmt.Sprintf(`"per-minute";r=%d;t=`, 5-i)
		got := res.Header.Get("RateLimit")
		switch {
		case i < 6 && (res.StatusCode != 200 || len(got) < len(want) || got[:len(want)] != want):
			t.Fatalf("request %d: %d RateLimit %q, want 200 and %s...", i+1, res.StatusCode, got, want)
		case i == 6 && res.StatusCode != 429:
			t.Fatalf("request 7: %d, want 429 past the per-minute limit", res.StatusCode)
		}
	}
	if up.count() != 6 {
		t.Fatalf("the upstream saw %d requests, want 6", up.count())
	}
	if calls := scriptCalls(t, []*redis.Client{s.Client(t)}) - before; calls > 4 {
		t.Fatalf("%d script calls for 7 requests under leases of 4", calls)
	}
}
