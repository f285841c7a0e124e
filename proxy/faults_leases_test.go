package proxy_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
	"github.com/edgegate/gateway/proxy"
)

// The fault matrix's faults, for a concurrency policy's acquires and
// releases and, beside it, a fixed window's decisions: through each fault
// and after it, clients see only 200 or 503; once Redis answers again a
// request is admitted within one breaker cooldown and one deadline (the
// breaker opens at the latest a deadline after the fault's end, on calls
// still waiting on connections the fault swallowed; its probe runs on a
// connection dialed since); and once the load is over no lease is left,
// neither counted by the gateway nor live in Redis once lease_ttl has
// passed (a release the fault lost is recovered by expiry).
func TestFaultMatrixLeasesReturnAfterTheLoad(t *testing.T) {
	const leaseTTL = 2 * time.Second
	// The slack is the 50ms between tries and a busy machine's
	// scheduling.
	const recovery = limiter.DefaultBreakerCooldown + faultDeadline + 800*time.Millisecond
	policies := []struct {
		name   string
		policy func() *limiter.Policy
	}{
		{"in flight", func() *limiter.Policy { return limitertest.Concurrency(100, leaseTTL) }},
		{"fixed window", func() *limiter.Policy { return limitertest.FixedWindow(1<<30, time.Second) }},
	}
	for _, c := range []struct {
		name       string
		begin, end func(s *redistest.Server, l *redistest.Link)
	}{
		{"replies later than the deadline",
			func(_ *redistest.Server, l *redistest.Link) { l.Delay(2 * faultDeadline) },
			func(_ *redistest.Server, l *redistest.Link) { l.Heal() }},
		{"a black hole",
			func(_ *redistest.Server, l *redistest.Link) { l.Blackhole() },
			func(_ *redistest.Server, l *redistest.Link) { l.Heal() }},
		{"connections reset in the middle of replies",
			func(_ *redistest.Server, l *redistest.Link) { l.ResetMidReply() },
			func(_ *redistest.Server, l *redistest.Link) { l.Heal() }},
		{"a redis-server frozen by SIGSTOP",
			func(s *redistest.Server, _ *redistest.Link) { s.Stop() },
			func(s *redistest.Server, _ *redistest.Link) { s.Cont() }},
	} {
		for _, kind := range policies {
			t.Run(c.name+"/"+kind.name, func(t *testing.T) {
				s := redistest.Start(t)
				link := redistest.StartLink(t, s.Addr, false)
				up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					time.Sleep(10 * time.Millisecond)
					io.WriteString(w, "report")
				}))
				t.Cleanup(up.Close)
				p := redisPolicy(kind.policy(), "matrix-"+strings.ReplaceAll(kind.name, " ", "-"))
				m := proxy.NewMetrics(prometheus.NewRegistry())
				h, err := proxy.NewHandler(proxy.Options{Metrics: m}, proxy.Config{
					Routes:   []proxy.Route{concurrencyRoute(t, up.URL, p)},
					Resolver: newResolver(t, []string{"127.0.0.1/32"}),
					Limiter:  redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{link.Addr}}),
					Deadline: faultDeadline,
				})
				if err != nil {
					t.Fatal(err)
				}
				gw := httptest.NewServer(h)
				t.Cleanup(gw.Close)

				var answers statusCounter
				drive := func(d time.Duration) {
					var wg sync.WaitGroup
					until := time.Now().Add(d)
					for w := range faultWorkers {
						wg.Go(func() {
							client := &http.Client{Timeout: 5 * time.Second}
							for time.Now().Before(until) {
								req, _ := http.NewRequest("GET", gw.URL+"/report", nil)
								req.Header.Set(faultPrincipal, "worker-"+strconv.Itoa(w))
								if answers.send(t, client, req) == 0 {
									return
								}
							}
						})
					}
					wg.Wait()
				}
				drive(200 * time.Millisecond)
				c.begin(s, link)
				drive(600 * time.Millisecond)
				c.end(s, link)
				// Decisions return (the breaker closes within its cooldown),
				// then a last load runs on a healthy Redis.
				healed := time.Now()
				for until := healed.Add(recovery); ; time.Sleep(50 * time.Millisecond) {
					res, err := http.Get(gw.URL + "/report")
					if err == nil {
						io.Copy(io.Discard, res.Body)
						res.Body.Close()
						if res.StatusCode == 200 {
							t.Logf("first admission %v after the fault's end", time.Since(healed).Round(time.Millisecond))
							break
						}
					}
					if time.Now().After(until) {
						t.Fatalf("no request admitted within %v of the fault's end", recovery)
					}
				}
				before := answers.counts()[200]
				drive(300 * time.Millisecond)
				statuses := answers.counts()
				if statuses[200] == before {
					t.Errorf("statuses %v: nothing admitted after recovery", statuses)
				}
				for code := range statuses {
					if code != 200 && code != 503 {
						t.Errorf("statuses %v: only 200 and 503 may come", statuses)
					}
				}
				if !p.HoldsLeases() {
					t.Logf("statuses %v", statuses)
					return
				}
				if n := testutil.ToFloat64(m.LeasesHeld.WithLabelValues("reports", p.Name)); n != 0 {
					t.Errorf("the gateway counts %v leases held after the load, want 0", n)
				}
				admin := s.Client(t)
				ctx := context.Background()
				live := func() int64 {
					keys, err := admin.Keys(ctx, "rl:*:l").Result()
					if err != nil {
						t.Fatal(err)
					}
					now, err := admin.Time(ctx).Result()
					if err != nil {
						t.Fatal(err)
					}
					var n int64
					for _, k := range keys {
						n += admin.ZCount(ctx, k, "("+strconv.FormatInt(now.UnixMilli(), 10), "+inf").Val()
					}
					return n
				}
				ended := time.Now()
				for live() != 0 {
					if time.Since(ended) > leaseTTL+time.Second {
						t.Fatalf("%d leases still live in Redis %v after the load, want none past lease_ttl (%v)", live(), time.Since(ended), leaseTTL)
					}
					time.Sleep(50 * time.Millisecond)
				}
				t.Logf("statuses %v; no live lease %v after the load", statuses, time.Since(ended).Round(time.Millisecond))
			})
		}
	}
}
