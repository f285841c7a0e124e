package proxy_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
)

// arrivals is an upstream that notes when each request reached it.
type arrivals struct {
	*httptest.Server
	mu sync.Mutex
	at []time.Time
}

func newArrivals(t *testing.T) *arrivals {
	a := &arrivals{}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.at = append(a.at, time.Now())
		a.mu.Unlock()
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *arrivals) times() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.at)
}

// smoothing is a token bucket of capacity, refilled with capacity tokens
// a second, that delays up to maxDelay, on Redis's clock.
func smoothing(capacity int64, maxDelay time.Duration) *limiter.Policy {
	p := policy(limitertest.TokenBucket(capacity, capacity, time.Second), "smooth")
	p.MaxDelay, p.Clock = maxDelay, limiter.ClockBackend
	return p
}

// A burst of 4 into a bucket of 2 a second, sent at once across two
// gateways sharing one Redis: all 4 admitted, the last two held for the
// refill, so the upstream never sees more than the bucket lets through.
func TestABurstIsDelayedNotRefusedAcrossTwoGatewaysSharingRedis(t *testing.T) {
	s := redistest.Start(t)
	up := newArrivals(t)
	p := smoothing(2, time.Second)
	var gs []*gateway
	var ms []*proxy.Metrics
	for range 2 {
		m := proxy.NewMetrics(prometheus.NewRegistry())
		lim := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
		gs = append(gs, newGateway(t, setup{routes: []proxy.Route{concurrencyRoute(t, up.URL, p)}, metrics: m, limiter: lim}))
		ms = append(ms, m)
	}
	start := time.Now()
	var wg sync.WaitGroup
	codes := make([]int, 4)
	limits := make([]string, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := gs[i%2].get(t, "/smooth")
			res.Body.Close()
			codes[i], limits[i] = res.StatusCode, res.Header.Get("RateLimit")
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if !slices.Equal(codes, []int{200, 200, 200, 200}) {
		t.Fatalf("statuses %v, want 4 × 200 (RateLimit %q)", codes, limits)
	}
	at := up.times()
	if len(at) != 4 {
		t.Fatalf("the upstream saw %d requests, want 4", len(at))
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	var after []time.Duration
	for _, a := range at {
		after = append(after, a.Sub(start))
	}
	t.Logf("arrivals after the burst was sent: %v; it took %s", after, took)
	// Two tokens at once, two a second after the first decision, which
	// came after the burst was sent: the third and fourth arrivals cannot
	// come sooner (Redis counts whole milliseconds), and they come about
	// then, held rather than refused.
	for k, d := range after {
		switch {
		case k < 2 && d > 900*time.Millisecond:
			t.Errorf("arrival %d came %s after the burst; want it at once", k+1, d)
		case k >= 2 && d < 999*time.Millisecond:
			t.Errorf("arrival %d came %s after the burst, before the refill: the bucket of 2 a second was exceeded", k+1, d)
		case k >= 2 && d > 2*time.Second:
			t.Errorf("arrival %d came %s after the burst; want it about a second after", k+1, d)
		}
	}
	delayed := 0
	var observed uint64
	for i, g := range gs {
		for _, rec := range accessLines(t, g, 0) {
			if rec["outcome"] == "delayed" {
				delayed++
				if ms, _ := rec["delay_ms"].(float64); ms < 500 || ms > 1000 {
					t.Errorf("a delayed request logged delay_ms %v, want the rest of the second after the first decision", rec["delay_ms"])
				}
			}
		}
		observed += histogramCount(t, ms[i].Delays.WithLabelValues("reports", "smooth"))
	}
	if delayed != 2 || observed != 2 {
		t.Errorf("%d requests logged delayed and %d delays observed, want 2 and 2", delayed, observed)
	}
	// The headers count from when the response went: a held request's
	// bucket is full again a second after it, not two.
	for i, l := range limits {
		if l != `"smooth";r=0;t=1` && l != `"smooth";r=1;t=1` {
			t.Errorf("response %d: RateLimit %q, want r=0 or 1 and t=1", i+1, l)
		}
	}
}

// histogramCount is how many observations the histogram o holds.
func histogramCount(t *testing.T, o prometheus.Observer) uint64 {
	t.Helper()
	h, ok := o.(prometheus.Histogram)
	if !ok {
		t.Fatalf("%T is no histogram", o)
	}
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// getFor sends GET path to g and gives up after wait, as a client that
// leaves does; 0 and an error when it left first.
func (g *gateway) getFor(t *testing.T, path string, wait time.Duration) (int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", g.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	res.Body.Close()
	return res.StatusCode, nil
}

// lastLine waits for g's access log line number n (from 1) and returns it.
func lastLine(t *testing.T, g *gateway, n int) map[string]any {
	t.Helper()
	var lines []map[string]any
	waitFor(t, fmt.Sprintf("access log line %d", n), func() bool {
		lines = accessLines(t, g, 0)
		return len(lines) >= n
	})
	return lines[n-1]
}

// A client that leaves while its request is held gives its place back:
// the next request is held for the same delay, where without the
// give-back it would need two refills and be refused.
func TestAClientThatLeavesWhileHeldGivesItsPlaceBack(t *testing.T) {
	onEachBackend(t, func(t *testing.T, lim proxy.Limiter) {
		up := newArrivals(t)
		p := smoothing(1, time.Second)
		g := newGateway(t, setup{routes: []proxy.Route{concurrencyRoute(t, up.URL, p)}, limiter: lim})
		logClock := stopClock(g)
		if code, err := g.getFor(t, "/", 5*time.Second); code != 200 {
			t.Fatalf("first request: %d %v", code, err)
		}
		for i := 2; i <= 3; i++ {
			logClock.Advance(time.Second) // each refusal of the same outcome is logged
			if code, err := g.getFor(t, "/", 200*time.Millisecond); err == nil {
				t.Fatalf("request %d answered %d at once; want it held", i, code)
			}
			rec := lastLine(t, g, i)
			if ms, _ := rec["delay_ms"].(float64); rec["outcome"] != "client_closed" || rec["status"] != float64(499) || ms <= 0 || ms > 1000 {
				t.Fatalf("request %d logged %v; want client_closed, 499, held for the rest of the second", i, rec)
			}
			if w, ok := lim.(interface{ WaitReleases() }); ok {
				w.WaitReleases()
			}
		}
		if n := len(up.times()); n != 1 {
			t.Fatalf("the upstream saw %d requests, want 1: a request whose client left went on", n)
		}
	})
}

// Past limiter.max_delayed requests held by this instance, a request a
// policy would delay is refused at once, as a plain denial.
func TestMaxDelayedBoundsTheRequestsHeld(t *testing.T) {
	up := newArrivals(t)
	p := smoothing(1, 2*time.Second)
	lim := limiter.NewMemory(limiter.MemoryOptions{})
	t.Cleanup(func() { lim.Close() })
	m := proxy.NewMetrics(prometheus.NewRegistry())
	g := newGateway(t, setup{routes: []proxy.Route{concurrencyRoute(t, up.URL, p)}, limiter: lim, metrics: m, maxDelayed: 1})
	if code, _ := g.getFor(t, "/", 5*time.Second); code != 200 {
		t.Fatalf("first request: %d", code)
	}
	held := make(chan int)
	go func() {
		code, _ := g.getFor(t, "/", 5*time.Second)
		held <- code
	}()
	waitFor(t, "the second request to be held", func() bool {
		return histogramCount(t, m.Delays.WithLabelValues("reports", "smooth")) == 1
	})
	start := time.Now()
	res := g.get(t, "/")
	res.Body.Close()
	if res.StatusCode != 429 || time.Since(start) > 500*time.Millisecond || res.Header.Get("Retry-After") != "2" {
		t.Fatalf("past max_delayed: %d after %s, Retry-After %q; want 429 at once, 2", res.StatusCode, time.Since(start), res.Header.Get("Retry-After"))
	}
	if code := <-held; code != 200 {
		t.Fatalf("the held request: %d", code)
	}
	if rec := lastLine(t, g, 2); rec["outcome"] != "denied" {
		t.Fatalf("logged %v, want denied", rec)
	}
	if rec := lastLine(t, g, 3); rec["outcome"] != "delayed" {
		t.Fatalf("logged %v, want delayed", rec)
	}
}

// A shadow policy that would delay holds nothing: the request goes on at
// once, logged as what the policy would have done.
func TestAShadowPolicysDelayHoldsNothing(t *testing.T) {
	up := newArrivals(t)
	p := smoothing(1, time.Second)
	p.Shadow = true
	lim := limiter.NewMemory(limiter.MemoryOptions{})
	t.Cleanup(func() { lim.Close() })
	g := newGateway(t, setup{routes: []proxy.Route{concurrencyRoute(t, up.URL, p)}, limiter: lim})
	for range 2 {
		start := time.Now()
		if code, _ := g.getFor(t, "/", 5*time.Second); code != 200 || time.Since(start) > 500*time.Millisecond {
			t.Fatalf("%d after %s; want 200 at once", code, time.Since(start))
		}
	}
	rec := lastLine(t, g, 2)
	if ms, _ := rec["delay_ms"].(float64); rec["outcome"] != "shadow_delayed" || rec["policy"] != "smooth" || ms <= 0 || ms > 1000 {
		t.Fatalf("logged %v; want shadow_delayed by smooth, delay_ms the rest of the second", rec)
	}
}

// A plan's policy may delay: the gold plan's smoothing bucket holds the
// second request for the refill, where the route's own policy refuses it.
func TestAPlansPolicyDelays(t *testing.T) {
	up := newArrivals(t)
	r := concurrencyRoute(t, up.URL, policy(limitertest.TokenBucket(1, 1, time.Second), "free"))
	r.Subject = []subject.Kind{subject.APIKey}
	r.Plans = map[string][]*limiter.Policy{"gold": {smoothing(1, time.Second)}}
	lim := limiter.NewMemory(limiter.MemoryOptions{})
	t.Cleanup(func() { lim.Close() })
	m := proxy.NewMetrics(prometheus.NewRegistry())
	g := newGateway(t, setup{routes: []proxy.Route{r}, limiter: lim, metrics: m})
	wantStatuses(t, statuses(t, g, "/", 2, "X-API-Key", "known-key-one"), 200, 429)
	start := time.Now()
	wantStatuses(t, statuses(t, g, "/", 2, "X-API-Key", "known-gold-key"), 200, 200)
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Fatalf("the gold plan's two requests took %s; want the second held about 1s", took)
	}
	if n := histogramCount(t, m.Delays.WithLabelValues("reports", "smooth")); n != 1 {
		t.Fatalf("%d delays observed under the plan's policy, want 1", n)
	}
}
