package proxy_test

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
)

// The one-burst overshoot: 40 requests at once, each costing 50 by its
// cost header, on a budget of 100 with the last unit left. Each admission
// reserves its policy's reserve, so no more are in flight than the units
// left hold reserves: one with the default reserve of 1, none with a
// reserve of 50; and on a fresh budget with a reserve of 50, two. The
// debt that follows is at most (admitted) × (50 - reserve).
func TestABurstOnTheLastUnitsAdmitsNoMoreThanTheyHoldReserves(t *testing.T) {
	for _, c := range []struct {
		name          string
		reserve, left int64
	}{
		{"the default reserve of 1, the last unit left", limiter.DefaultReserve, 1},
		{"a reserve of 50, the last unit left", 50, 1},
		{"a reserve of 50, the whole budget left", 50, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			onEachBackend(t, func(t *testing.T, lim proxy.Limiter) {
				burstOnTheLastUnits(t, lim, c.reserve, c.left)
			})
		})
	}
}

func burstOnTheLastUnits(t *testing.T, lim proxy.Limiter, reserve, left int64) {
	release := make(chan struct{})
	var held atomic.Int64
	up, reached := answering(t, func(w http.ResponseWriter, r *http.Request) {
		if cost := r.Header.Get("X-Spend"); cost != "" {
			w.Header().Set("X-Usage-Cost", cost)
			return
		}
		held.Add(1)
		<-release
		w.Header().Set("X-Usage-Cost", "50")
	})
	p := redisPolicy(limitertest.FixedWindow(100, time.Hour), "usage")
	p.CostHeader, p.MaxCost, p.Reserve = "X-Usage-Cost", 50, reserve
	g := newGateway(t, setup{routes: []proxy.Route{route("api", "/api", up, t, p)}, limiter: lim})
	for spent := 100 - left; spent > 0; spent -= min(spent, 50) {
		if res := g.get(t, "/api", "X-Spend", strconv.FormatInt(min(spent, 50), 10)); res.StatusCode != 200 {
			t.Fatalf("spending: status %d", res.StatusCode)
		}
	}
	spending := reached.Load()

	var refused atomic.Int64
	var wg sync.WaitGroup
	codes := make([]int, 40)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := g.get(t, "/api")
			codes[i] = res.StatusCode
			if res.StatusCode == 429 {
				refused.Add(1)
			}
		}()
	}
	// Every request is either refused or held by the upstream at once.
	waitFor(t, "every request refused or in flight", func() bool { return refused.Load()+held.Load() == 40 })
	close(release)
	wg.Wait()

	want := left / reserve
	admitted := reached.Load() - spending
	if admitted != want {
		t.Fatalf("%d of 40 admitted, want %d (%d left, reserve %d); statuses %v", admitted, want, left, reserve, codes)
	}
	// What is left: the admitted settled at 50 each.
	res := g.get(t, "/api", "X-Spend", "0")
	if wantCode := map[bool]int{true: 200, false: 429}[left-50*admitted >= reserve]; res.StatusCode != wantCode {
		t.Fatalf("after the burst: status %d, want %d", res.StatusCode, wantCode)
	}
	if res.StatusCode == 200 {
		if r := remaining(t, res, "usage"); r != left-50*admitted-reserve {
			t.Fatalf("after the burst: r=%d, want %d", r, left-50*admitted-reserve)
		}
	}
}

// costTransport answers every request at once with its cost header.
type costTransport struct{ cost []string }

func (c *costTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{"Date": benchDate, "X-Usage-Cost": c.cost},
		Body: http.NoBody, Request: r, ContentLength: 0}, nil
}

// BenchmarkRequestPathChargedByTheResponse is the request path of a route
// whose one policy the response charges, on the memory backend: each
// request reserves at admission and is settled after its response, once
// the reserve given back (a cost of 0), once the rest charged (a cost of
// 5 over a reserve of 1), once the reserve the cost (nothing sent).
func BenchmarkRequestPathChargedByTheResponse(b *testing.B) {
	for _, bc := range []struct {
		name string
		cost string
	}{
		{"given_back", "0"},
		{"charged_the_rest", "5"},
		{"the_reserve", "1"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			m := limiter.NewMemory(limiter.MemoryOptions{})
			defer m.Close()
			p := limitertest.FixedWindow(1<<40, time.Hour)
			p.CostHeader, p.MaxCost, p.Dedup = "X-Usage-Cost", 100, limiter.Dedup{}
			rt := proxy.Route{OperationID: "orders.read", Path: "/orders", Upstream: "http://upstream.invalid",
				Policies: onePolicy(p), Subject: []subject.Kind{subject.ClientIP}, Cost: 1}
			h, err := proxy.NewHandler(proxy.Options{Transport: &costTransport{cost: []string{bc.cost}}}, proxy.Config{
				Routes: []proxy.Route{rt}, Resolver: newResolver(b, nil), Limiter: m,
			})
			if err != nil {
				b.Fatal(err)
			}
			benchServe(b, h, 1, 200)
		})
	}
}

// A request held for a delay whose client leaves never reaches the
// upstream: the reserve its response-charged policy took goes back with
// the delayed place, so two clients that left cost the budget nothing.
func TestAClientThatLeavesWhileHeldGivesItsReserveBack(t *testing.T) {
	onEachBackend(t, func(t *testing.T, lim proxy.Limiter) {
		up, reached := answering(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Usage-Cost", "1")
		})
		usage := redisPolicy(limitertest.FixedWindow(3, time.Hour), "usage")
		usage.CostHeader, usage.MaxCost = "X-Usage-Cost", 3
		smooth := smoothing(1, time.Second)
		g := newGateway(t, setup{routes: []proxy.Route{concurrencyRoute(t, up.URL, smooth, usage)}, limiter: lim})
		logClock := stopClock(g)
		if code, err := g.getFor(t, "/", 5*time.Second); code != 200 {
			t.Fatalf("first request: %d %v", code, err)
		}
		for i := 2; i <= 3; i++ {
			logClock.Advance(time.Second)
			if code, err := g.getFor(t, "/", 200*time.Millisecond); err == nil {
				t.Fatalf("request %d answered %d at once; want it held", i, code)
			}
			if rec := lastLine(t, g, i); rec["outcome"] != "client_closed" {
				t.Fatalf("request %d logged %v; want client_closed", i, rec)
			}
		}
		res := g.get(t, "/")
		if res.StatusCode != 200 || remaining(t, res, "usage") != 1 {
			t.Fatalf("after two clients left while held: %d, RateLimit %q; want 200 with usage r=1 (3 - 1 spent - 1 reserved)",
				res.StatusCode, res.Header.Get("RateLimit"))
		}
		if n := reached.Load(); n != 2 {
			t.Fatalf("the upstream saw %d requests, want 2", n)
		}
	})
}
