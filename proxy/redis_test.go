package proxy_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
)

func redisPolicy(p *limiter.Policy, name string) *limiter.Policy {
	p.Name = name
	p.Clock = limiter.ClockBackend
	return p
}

func TestRedisConcurrentRequestsAdmitExactlyTheLimit(t *testing.T) {
	s := redistest.Start(t)
	up := newUpstream(t)
	g := newGateway(t, setup{
		routes:  []proxy.Route{route("orders.read", "/orders", up, t, redisPolicy(limitertest.FixedWindow(5, time.Minute), "five"))},
		limiter: redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}}),
	})
	var mu sync.Mutex
	counts := map[int]int{}
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := http.Get(g.URL + "/orders")
			if err != nil {
				t.Error(err)
				return
			}
			res.Body.Close()
			mu.Lock()
			counts[res.StatusCode]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if counts[200] != 5 || counts[429] != 35 || up.count() != 5 {
		t.Fatalf("statuses %v, upstream saw %d; want 5 allowed and 35 denied", counts, up.count())
	}
}

func TestRedisTwoGatewaysShareOneBudget(t *testing.T) {
	s := redistest.Start(t)
	up := newUpstream(t)
	var gateways []*gateway
	for i := 0; i < 2; i++ {
		gateways = append(gateways, newGateway(t, setup{
			routes:  []proxy.Route{route("orders.read", "/orders", up, t, redisPolicy(limitertest.FixedWindow(6, time.Minute), "six"))},
			limiter: redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}}),
		}))
	}
	allowed := 0
	for i := 0; i < 20; i++ {
		if gateways[i%2].get(t, "/orders").StatusCode == 200 {
			allowed++
		}
	}
	if allowed != 6 || up.count() != 6 {
		t.Fatalf("%d allowed, upstream saw %d; want 6 in total", allowed, up.count())
	}
}

func TestRedisClusterTwelveRoutes(t *testing.T) {
	c := redistest.StartCluster(t)
	up := newUpstream(t)
	var routes []proxy.Route
	for i := 0; i < 12; i++ {
		routes = append(routes, route(fmt.Sprint("op-", i), fmt.Sprint("/op", i), up, t, redisPolicy(limitertest.FixedWindow(2, time.Minute), "two")))
	}
	g := newGateway(t, setup{routes: routes, limiter: redistest.NewLimiter(t, limiter.RedisOptions{Mode: limiter.RedisCluster, Addrs: c.Addrs(), KeyPrefix: "gw:"})})
	for i := 0; i < 12; i++ {
		wantStatuses(t, statuses(t, g, fmt.Sprint("/op", i), 3), 200, 200, 429)
	}
	holding := 0
	for _, n := range c.Nodes {
		if keys, _ := n.Client(t).Keys(context.Background(), "gw:{*}:two:*").Result(); len(keys) > 0 {
			holding++
		}
	}
	if holding < 2 {
		t.Fatalf("the twelve routes' keys sit on %d masters, want at least 2", holding)
	}
}

func TestRedisHoldsNoRawIdentity(t *testing.T) {
	s := redistest.Start(t)
	up := newUpstream(t)
	g := newGateway(t, setup{
		routes:  []proxy.Route{route("orders.read", "/", up, t, redisPolicy(limitertest.SlidingCounter(100, time.Minute), "p"))},
		limiter: redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}}),
		trusted: []string{"127.0.0.1/32"},
	})
	g.get(t, "/")
	g.get(t, "/", "X-API-Key", "known-key-one")
	g.get(t, "/", "X-Auth-Principal", "alice@example.com")
	g.get(t, "/", "X-Forwarded-For", "203.0.113.77")
	admin := s.Client(t)
	ctx := context.Background()
	keys, _ := admin.Keys(ctx, "*").Result()
	var dump strings.Builder
	states := 0
	for _, k := range keys {
		dump.WriteString(k + "\n")
		switch admin.Type(ctx, k).Val() {
		case "hash":
			for f, v := range admin.HGetAll(ctx, k).Val() {
				dump.WriteString(f + "=" + v + "\n")
			}
			if strings.HasPrefix(k, "rl:{v1:") && strings.HasSuffix(k, "}:p:1") {
				states++
			}
		case "string":
			dump.WriteString(admin.Get(ctx, k).Val() + "\n")
		case "list":
			dump.WriteString(strings.Join(admin.LRange(ctx, k, 0, -1).Val(), ",") + "\n")
		}
	}
	for _, raw := range []string{"127.0.0.1", "known-key-one", "alice", "203.0.113.77"} {
		if strings.Contains(dump.String(), raw) {
			t.Errorf("Redis holds %q:\n%s", raw, dump.String())
		}
	}
	if states != 4 {
		t.Fatalf("%d subject states, want 4:\n%s", states, dump.String())
	}
}

// TestRedisFaultsOverHTTP: every fault gives 503 with Retry-After, in time,
// and nothing reaches the upstream; decisions come back when Redis does.
func TestRedisFaultsOverHTTP(t *testing.T) {
	p := func() *limiter.Policy { return redisPolicy(limitertest.FixedWindow(100, time.Minute), "p") }
	failsClosed := func(t *testing.T, g *gateway, up *upstream, within time.Duration) {
		t.Helper()
		before := up.count()
		start := time.Now()
		res := g.get(t, "/")
		took := time.Since(start)
		if res.StatusCode != 503 || res.Header.Get("Retry-After") != "1" {
			t.Fatalf("%d Retry-After=%q, want 503 with Retry-After 1", res.StatusCode, res.Header.Get("Retry-After"))
		}
		if took > within {
			t.Fatalf("503 after %v, want within %v", took, within)
		}
		if up.count() != before {
			t.Fatal("the upstream was reached")
		}
	}
	recovers := func(t *testing.T, g *gateway, within time.Duration) {
		t.Helper()
		for deadline := time.Now().Add(within); ; time.Sleep(50 * time.Millisecond) {
			if g.get(t, "/").StatusCode == 200 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no 200 within %v", within)
			}
		}
	}
	t.Run("refused connections", func(t *testing.T) {
		s := redistest.Start(t)
		up := newUpstream(t)
		g := newGateway(t, setup{routes: []proxy.Route{route("r", "/", up, t, p())}, limiter: redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})})
		s.Kill()
		failsClosed(t, g, up, 300*time.Millisecond)
	})
	t.Run("a server that accepts and never answers", func(t *testing.T) {
		s := redistest.Start(t)
		proxyToRedis := redistest.StartProxy(t, s.Addr)
		up := newUpstream(t)
		g := newGateway(t, setup{routes: []proxy.Route{route("r", "/", up, t, p())}, limiter: redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{proxyToRedis.Addr}})})
		proxyToRedis.Hang()
		failsClosed(t, g, up, limiter.DefaultDeadline+150*time.Millisecond)
	})
	t.Run("killed, then restarted", func(t *testing.T) {
		s := redistest.Start(t)
		up := newUpstream(t)
		g := newGateway(t, setup{routes: []proxy.Route{route("r", "/", up, t, p())}, limiter: redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})})
		wantStatuses(t, statuses(t, g, "/", 1), 200)
		s.Kill()
		failsClosed(t, g, up, 300*time.Millisecond)
		s.Restart()
		recovers(t, g, 5*time.Second)
	})
	t.Run("SCRIPT FLUSH between requests", func(t *testing.T) {
		s := redistest.Start(t)
		up := newUpstream(t)
		g := newGateway(t, setup{routes: []proxy.Route{route("r", "/", up, t, p())}, limiter: redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})})
		wantStatuses(t, statuses(t, g, "/", 1), 200)
		s.Client(t).ScriptFlush(context.Background())
		wantStatuses(t, statuses(t, g, "/", 1), 200)
	})
	t.Run("a lost reply is charged once", func(t *testing.T) {
		s := redistest.Start(t)
		proxyToRedis := redistest.StartProxy(t, s.Addr)
		up := newUpstream(t)
		// No denial cache: its resets subscription would share the proxy,
		// and DropNextReply could drop the SUBSCRIBE reply instead.
		g := newGateway(t, setup{routes: []proxy.Route{route("r", "/", up, t, p())}, limiter: redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{proxyToRedis.Addr}, DenialCacheEntries: -1})})
		wantStatuses(t, statuses(t, g, "/", 1), 200)
		proxyToRedis.DropNextReply()
		res := g.get(t, "/")
		if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("RateLimit"), `"p";r=98;`) {
			t.Fatalf("%d RateLimit=%q, want 200 with 98 left", res.StatusCode, res.Header.Get("RateLimit"))
		}
		if proxyToRedis.Dropped() != 1 {
			t.Fatal("no reply was dropped")
		}
	})
	t.Run("sentinel failover", func(t *testing.T) {
		sg := redistest.StartSentinel(t)
		up := newUpstream(t)
		g := newGateway(t, setup{routes: []proxy.Route{route("r", "/", up, t, p())},
			limiter: redistest.NewLimiter(t, limiter.RedisOptions{Mode: limiter.RedisSentinel, Addrs: sg.SentinelAddrs(), MasterName: sg.MasterName})})
		wantStatuses(t, statuses(t, g, "/", 1), 200)
		sg.Master.Kill()
		failsClosed(t, g, up, limiter.DefaultDeadline+150*time.Millisecond)
		recovers(t, g, 30*time.Second)
	})
}

func BenchmarkRequestPathRedis(b *testing.B) {
	s := redistest.Start(b)
	r := redistest.NewLimiter(b, limiter.RedisOptions{Addrs: []string{s.Addr}, KeyPrefix: "bench:"})
	p := redisPolicy(limitertest.FixedWindow(1<<40, time.Hour), "bench")
	h, err := proxy.NewHandler(proxy.Options{Transport: &countingTransport{}}, proxy.Config{
		Routes:   []proxy.Route{{OperationID: "orders.read", Path: "/orders", Upstream: "http://upstream.invalid", Policies: onePolicy(p), Subject: []subject.Kind{subject.ClientIP}, Cost: 1}},
		Resolver: newResolver(b, nil), Limiter: r,
	})
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/orders/42", nil)
	req.RemoteAddr = "203.0.113.5:4242"
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatalf("status %d", w.Code)
		}
	}
}

// A client that leaves while the limiter is still deciding is its own
// outcome, never a limiter failure that would page someone about Redis.
func TestAClientThatLeavesBeforeTheDecisionIsNotALimiterFailure(t *testing.T) {
	hole := redistest.Blackhole(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := limiter.NewRedis(ctx, limiter.RedisOptions{Addrs: []string{hole}, Breaker: limiter.BreakerOptions{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	up := newUpstream(t)
	g := newGateway(t, setup{routes: []proxy.Route{route("orders.read", "/", up, t, redisPolicy(limitertest.FixedWindow(5, time.Minute), "p"))}, limiter: r})
	reqCtx, leave := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer leave()
	req, _ := http.NewRequestWithContext(reqCtx, "GET", g.URL+"/", nil)
	if res, err := http.DefaultClient.Do(req); err == nil {
		res.Body.Close()
		t.Fatalf("answered %d before the deadline of a black hole", res.StatusCode)
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(g.logs.String(), `"msg":"request"`); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no access log line")
		}
	}
	logs := g.logs.String()
	if !strings.Contains(logs, `"outcome":"client_closed"`) || !strings.Contains(logs, `"status":499`) {
		t.Fatalf("access log: %s", logs)
	}
	if up.count() != 0 {
		t.Fatal("the upstream was reached")
	}
}
