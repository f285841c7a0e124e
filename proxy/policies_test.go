package proxy_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
	"github.com/edgegate/gateway/proxy"
)

func shadow(p *limiter.Policy) *limiter.Policy {
	p.Shadow = true
	return p
}

func multiRoute(id, path string, up *upstream, t *testing.T, ps ...*limiter.Policy) proxy.Route {
	r := route(id, path, up, t, nil)
	r.Policies = ps
	return r
}

func violated(t *testing.T, res *http.Response) []string {
	t.Helper()
	var body struct {
		Violated []string `json:"violated-policies"`
	}
	b, _ := io.ReadAll(res.Body)
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("429 body %q: %v", b, err)
	}
	return body.Violated
}

func TestShadowPolicyForwardsWouldBeDenials(t *testing.T) { onEachBackend(t, shadowFiveOfFive) }

func shadowFiveOfFive(t *testing.T, lim proxy.Limiter) {
	up := newUpstream(t)
	m := proxy.NewMetrics(prometheus.NewRegistry())
	g := newGateway(t, setup{
		routes:  []proxy.Route{route("orders.read", "/orders", up, t, shadow(redisPolicy(limitertest.FixedWindow(2, time.Minute), "trial")))},
		metrics: m,
		limiter: lim,
	})
	for i := range 5 {
		res := g.get(t, "/orders")
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("request %d: status %d, want 200", i+1, res.StatusCode)
		}
		if h := res.Header.Get("RateLimit"); h != "" || res.Header.Get("RateLimit-Policy") != "" {
			t.Fatalf("request %d: a shadow policy set RateLimit %q", i+1, h)
		}
	}
	if up.count() != 5 {
		t.Fatalf("upstream saw %d, want 5", up.count())
	}
	if n := testutil.ToFloat64(m.ShadowDenials.WithLabelValues("orders.read", "trial")); n != 3 {
		t.Fatalf("gateway_shadow_denials_total = %v, want 3", n)
	}
	if n := strings.Count(g.logs.String(), `"outcome":"shadow_denied","status":200`); n != 3 {
		t.Fatalf("%d shadow_denied lines, want 3:\n%s", n, g.logs)
	}
	if n := strings.Count(g.logs.String(), `"policy":"trial"`); n != 3 {
		t.Fatalf("%d lines name the policy, want 3:\n%s", n, g.logs)
	}
}

func TestShadowOnlyRouteForwardsWhenTheLimiterCannotDecide(t *testing.T) {
	for name, o := range map[string]limiter.Outcome{
		"unavailable":   limiter.Unavailable{Category: limiter.CircuitOpen},
		"indeterminate": limiter.Indeterminate{},
		"incompatible":  limiter.Incompatible{Reason: limiter.StateUnreadable},
	} {
		t.Run(name, func(t *testing.T) {
			up := newUpstream(t)
			g := newGateway(t, setup{
				routes: []proxy.Route{multiRoute("r", "/", up, t,
					shadow(policy(limitertest.FixedWindow(1, time.Minute), "a")),
					shadow(policy(limitertest.FixedWindow(1, time.Second), "b")))},
				limiter: stubLimiter{o},
			})
			if res := g.get(t, "/"); res.StatusCode != 200 || up.count() != 1 {
				t.Fatalf("status %d, upstream saw %d; want 200 forwarded", res.StatusCode, up.count())
			}
		})
	}
	t.Run("a route with an enforced policy fails closed", func(t *testing.T) {
		up := newUpstream(t)
		g := newGateway(t, setup{
			routes: []proxy.Route{multiRoute("r", "/", up, t,
				policy(limitertest.FixedWindow(1, time.Minute), "a"),
				shadow(policy(limitertest.FixedWindow(1, time.Second), "b")))},
			limiter: stubLimiter{limiter.Unavailable{Category: limiter.CircuitOpen}},
		})
		if res := g.get(t, "/"); res.StatusCode != 503 || up.count() != 0 {
			t.Fatalf("status %d, upstream saw %d; want 503, nothing forwarded", res.StatusCode, up.count())
		}
	})
}

// twoPolicies runs a route with a small and a large limit: the small one
// refuses, and the large one is charged only for what was admitted.
func twoPolicies(t *testing.T, lim proxy.Limiter, mk func(*limiter.Policy, string) *limiter.Policy) {
	up := newUpstream(t)
	g := newGateway(t, setup{
		routes: []proxy.Route{multiRoute("orders.read", "/orders", up, t,
			mk(limitertest.FixedWindow(2, time.Minute), "per-minute"),
			mk(limitertest.FixedWindow(10, time.Hour), "per-hour"))},
		limiter: lim,
	})
	wantRemaining := []string{`"per-minute";r=1;t=`, `"per-minute";r=0;t=`, `"per-minute";r=0;t=`, `"per-minute";r=0;t=`, `"per-minute";r=0;t=`}
	wantHour := []string{`"per-hour";r=9;t=`, `"per-hour";r=8;t=`, `"per-hour";r=8;t=`, `"per-hour";r=8;t=`, `"per-hour";r=8;t=`}
	for i := range 5 {
		res := g.get(t, "/orders")
		want := 200
		if i >= 2 {
			want = 429
		}
		if res.StatusCode != want {
			t.Fatalf("request %d: status %d, want %d", i+1, res.StatusCode, want)
		}
		if p := res.Header.Get("RateLimit-Policy"); p != `"per-minute";q=2;w=60, "per-hour";q=10;w=3600` {
			t.Fatalf("request %d: RateLimit-Policy %q", i+1, p)
		}
		rl := res.Header.Get("RateLimit")
		if !strings.HasPrefix(rl, wantRemaining[i]) || !strings.Contains(rl, ", "+wantHour[i]) {
			t.Fatalf("request %d: RateLimit %q, want %s…, %s…", i+1, rl, wantRemaining[i], wantHour[i])
		}
		if want == 429 {
			if v := violated(t, res); len(v) != 1 || v[0] != "per-minute" {
				t.Fatalf("violated-policies %q, want [per-minute]", v)
			}
			if ra := res.Header.Get("Retry-After"); ra == "" || ra == "0" {
				t.Fatalf("Retry-After %q", ra)
			}
		}
		res.Body.Close()
	}
	if up.count() != 2 {
		t.Fatalf("upstream saw %d, want 2", up.count())
	}
}

func TestTwoPoliciesChargeOnlyAdmittedRequests(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		m := limiter.NewMemory(limiter.MemoryOptions{})
		t.Cleanup(func() { m.Close() })
		twoPolicies(t, m, redisPolicy)
	})
	t.Run("redis", func(t *testing.T) {
		s := redistest.Start(t)
		twoPolicies(t, redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}}), redisPolicy)
	})
	t.Run("redis cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		twoPolicies(t, redistest.NewLimiter(t, limiter.RedisOptions{Mode: limiter.RedisCluster, Addrs: c.Addrs(), KeyPrefix: "gw:"}), redisPolicy)
	})
}

// mixed runs a fixed window, a token bucket and a sliding counter on one
// route; each in turn is the tightest.
func mixed(t *testing.T, lim proxy.Limiter) {
	up := newUpstream(t)
	g := newGateway(t, setup{
		routes: []proxy.Route{multiRoute("mixed", "/m", up, t,
			redisPolicy(limitertest.FixedWindow(5, time.Hour), "window"),
			redisPolicy(limitertest.TokenBucket(3, 1, time.Hour), "bucket"),
			redisPolicy(limitertest.SlidingCounter(4, time.Hour), "sliding"))},
		limiter: lim,
	})
	wantStatuses(t, statuses(t, g, "/m", 5), 200, 200, 200, 429, 429)
	res := g.get(t, "/m")
	defer res.Body.Close()
	if v := violated(t, res); len(v) != 1 || v[0] != "bucket" {
		t.Fatalf("violated-policies %q, want [bucket]", v)
	}
	rl := res.Header.Get("RateLimit")
	for _, want := range []string{`"window";r=2;`, `"bucket";r=0;`, `"sliding";r=1;`} {
		if !strings.Contains(rl, want) {
			t.Fatalf("RateLimit %q lacks %s", rl, want)
		}
	}
	if up.count() != 3 {
		t.Fatalf("upstream saw %d, want 3", up.count())
	}
}

func TestMixedAlgorithmsOnOneRoute(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		m := limiter.NewMemory(limiter.MemoryOptions{})
		t.Cleanup(func() { m.Close() })
		mixed(t, m)
	})
	t.Run("redis", func(t *testing.T) {
		s := redistest.Start(t)
		mixed(t, redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}}))
	})
	t.Run("redis cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		mixed(t, redistest.NewLimiter(t, limiter.RedisOptions{Mode: limiter.RedisCluster, Addrs: c.Addrs()}))
	})
}

func TestEveryDenyingPolicyIsNamedAndTheLongestWaitWins(t *testing.T) {
	up := newUpstream(t)
	g := newGateway(t, setup{
		routes: []proxy.Route{multiRoute("r", "/", up, t,
			policy(limitertest.FixedWindow(1, time.Minute), "short"),
			shadow(policy(limitertest.FixedWindow(1, time.Minute), "watching")),
			policy(limitertest.FixedWindow(1, time.Hour), "long"))},
	})
	wantStatuses(t, statuses(t, g, "/", 1), 200)
	res := g.get(t, "/")
	defer res.Body.Close()
	if v := violated(t, res); len(v) != 2 || v[0] != "short" || v[1] != "long" {
		t.Fatalf("violated-policies %q, want [short long]", v)
	}
	if ra := res.Header.Get("Retry-After"); ra != "3600" {
		t.Fatalf("Retry-After %q, want 3600", ra)
	}
	if p := res.Header.Get("RateLimit-Policy"); p != `"short";q=1;w=60, "long";q=1;w=3600` {
		t.Fatalf("RateLimit-Policy %q lists a shadow policy or misses one", p)
	}
}

func TestAShadowPolicyBesideAnEnforcedOneNeverRefuses(t *testing.T) {
	up := newUpstream(t)
	m := proxy.NewMetrics(prometheus.NewRegistry())
	g := newGateway(t, setup{
		routes: []proxy.Route{multiRoute("r", "/", up, t,
			policy(limitertest.FixedWindow(4, time.Minute), "enforced"),
			shadow(policy(limitertest.FixedWindow(1, time.Minute), "trial")))},
		metrics: m,
	})
	wantStatuses(t, statuses(t, g, "/", 5), 200, 200, 200, 200, 429)
	if n := testutil.ToFloat64(m.ShadowDenials.WithLabelValues("r", "trial")); n != 3 {
		t.Fatalf("gateway_shadow_denials_total = %v, want 3 (the refused fifth request is the enforced policy's)", n)
	}
	res := g.get(t, "/")
	res.Body.Close()
	if p := res.Header.Get("RateLimit-Policy"); p != `"enforced";q=4;w=60` {
		t.Fatalf("RateLimit-Policy %q, want the enforced policy alone", p)
	}
}
