package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/overload"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
)

// gatedUpstream answers each request once the test lets it go (or at
// once while open), counting what reached it.
type gatedUpstream struct {
	*httptest.Server
	gate     chan struct{}
	open     atomic.Bool
	arrived  atomic.Int64
	answered atomic.Int64
}

func newGatedUpstream(t *testing.T) *gatedUpstream {
	u := &gatedUpstream{gate: make(chan struct{})}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.arrived.Add(1)
		if !u.open.Load() {
			select {
			case <-u.gate:
			case <-r.Context().Done():
				return
			}
		}
		u.answered.Add(1)
		w.Write([]byte("ok"))
	}))
	t.Cleanup(func() {
		u.openUp()
		u.Close()
	})
	return u
}

// let answers n requests that are waiting, or will.
func (u *gatedUpstream) let(n int) {
	for range n {
		u.gate <- struct{}{}
	}
}

func (u *gatedUpstream) openUp() {
	if u.open.CompareAndSwap(false, true) {
		close(u.gate)
	}
}

// overloadGateway is a gateway whose routes forward to one pool with an
// overload block: "/critical" (critical), "/default" and "/batch"
// (default, lowered to sheddable for the plan "free"); each limits every
// subject to a generous fixed window, so subjects are known by their
// principal and plan headers.
type overloadGateway struct {
	*poolGateway
	cfg proxy.Config
}

// newOverloadGateway serves overloadConfig's routes on pool p, the
// configuration edited by edits first.
func newOverloadGateway(t *testing.T, p proxy.Pool, edits ...func(*proxy.Config)) *overloadGateway {
	t.Helper()
	g := &overloadGateway{poolGateway: &poolGateway{registry: prometheus.NewRegistry(), logs: &syncBuffer{}, t: t}}
	g.cfg = overloadConfig(t, p)
	for _, edit := range edits {
		edit(&g.cfg)
	}
	h, err := proxy.NewHandler(proxy.Options{
		Logger:    slog.New(slog.NewJSONHandler(g.logs, nil)),
		AccessLog: true,
		Metrics:   proxy.NewMetrics(g.registry),
	}, g.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	g.handler = h
	g.Server = httptest.NewServer(h)
	t.Cleanup(g.Close)
	return g
}

func overloadConfig(t testing.TB, p proxy.Pool) proxy.Config {
	m := limiter.NewMemory(limiter.MemoryOptions{})
	t.Cleanup(func() { m.Close() })
	generous := policy(limitertest.FixedWindow(1_000_000, time.Minute), "generous")
	sources := []subject.Kind{subject.Principal, subject.ClientIP}
	return proxy.Config{
		Routes: []proxy.Route{
			{OperationID: "critical", Path: "/critical", Pool: p.Name, Policies: onePolicy(generous), Subject: sources, Priority: overload.Critical},
			{OperationID: "default", Path: "/default", Pool: p.Name, Policies: onePolicy(generous), Subject: sources},
			{OperationID: "batch", Path: "/batch", Pool: p.Name, Policies: onePolicy(generous), Subject: sources,
				PlanPriority: map[string]overload.Priority{"free": overload.Sheddable}},
		},
		Pools:    []proxy.Pool{p},
		Resolver: overloadResolver(t),
		Limiter:  m,
	}
}

// overloadResolver believes the principal and plan headers from loopback,
// and knows the plan "free".
func overloadResolver(t testing.TB) *subject.Resolver {
	r, err := subject.NewResolver(subject.Options{
		TrustedProxies:   []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		PrincipalHeader:  "X-Auth-Principal",
		PlanHeader:       "X-Auth-Plan",
		Plans:            []string{"free"},
		PseudonymKeys:    map[int][]byte{1: []byte(fakeSecret)},
		PseudonymVersion: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// answer is one response, as the client saw it.
type answer struct {
	status     int
	retryAfter string
	problem    string
	err        error
}

// request sends path as tenant (a principal; "free:" before it puts the
// tenant on the free plan), canceled with ctx.
func (g *overloadGateway) request(ctx context.Context, path, tenant string) answer {
	req, _ := http.NewRequestWithContext(ctx, "GET", g.URL+path, nil)
	if plan, who, ok := strings.Cut(tenant, ":"); ok {
		req.Header.Set("X-Auth-Plan", plan)
		tenant = who
	}
	req.Header.Set("X-Auth-Principal", tenant)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer res.Body.Close()
	var p struct{ Type string }
	json.NewDecoder(res.Body).Decode(&p)
	return answer{status: res.StatusCode, retryAfter: res.Header.Get("Retry-After"), problem: p.Type}
}

// async sends a request on its own goroutine; its answer comes on the
// channel.
func (g *overloadGateway) async(ctx context.Context, path, tenant string) <-chan answer {
	ch := make(chan answer, 1)
	go func() { ch <- g.request(ctx, path, tenant) }()
	return ch
}

func (g *overloadGateway) queued() float64 {
	return g.metric("gateway_upstream_queued", "pool", "legacy")
}

// outcomes are the outcomes of the access log's lines, in order.
func (g *overloadGateway) outcomes() []string {
	var out []string
	for line := range strings.Lines(g.logs.String()) {
		var rec struct{ Msg, Outcome string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "request" {
			out = append(out, rec.Outcome)
		}
	}
	return out
}

func receive(t *testing.T, ch <-chan answer) answer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("no answer within 10s")
		return answer{}
	}
}

const reducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"

func TestOverloadOverHTTP(t *testing.T) {
	t.Run("a request over the limit waits in the queue and is forwarded when a slot frees", func(t *testing.T) {
		up := newGatedUpstream(t)
		g := newOverloadGateway(t, proxy.Pool{Name: "legacy", Targets: []string{up.URL},
			Overload: &overload.Options{MaxInFlight: 1, Queue: 4, QueueTimeout: 10 * time.Second}})
		first := g.async(context.Background(), "/default", "a")
		eventually(t, "the first request reaches the upstream", func() bool { return up.arrived.Load() == 1 })
		second := g.async(context.Background(), "/default", "b")
		eventually(t, "the second request queues", func() bool { return g.queued() == 1 })
		if up.arrived.Load() != 1 {
			t.Fatal("the second request reached the upstream past the limit")
		}
		if l := g.metric("gateway_upstream_limit", "pool", "legacy"); l != 1 {
			t.Fatalf("gateway_upstream_limit %v, want 1", l)
		}
		up.let(2)
		for _, ch := range []<-chan answer{first, second} {
			if a := receive(t, ch); a.status != 200 {
				t.Fatalf("status %d", a.status)
			}
		}
		if g.queued() != 0 {
			t.Fatal("queue not empty")
		}
	})
	t.Run("a request the full queue sheds gets 503 with Retry-After and the reduced-capacity problem, logged and counted as shed", func(t *testing.T) {
		up := newGatedUpstream(t)
		g := newOverloadGateway(t, proxy.Pool{Name: "legacy", Targets: []string{up.URL},
			Overload: &overload.Options{MaxInFlight: 1, Queue: -1, QueueTimeout: 2500 * time.Millisecond}})
		first := g.async(context.Background(), "/default", "a")
		eventually(t, "the first request reaches the upstream", func() bool { return up.arrived.Load() == 1 })
		a := g.request(context.Background(), "/batch", "free:b")
		if a.status != 503 || a.retryAfter != "3" || a.problem != reducedCapacity {
			t.Fatalf("shed request: %+v, want 503, Retry-After 3 (queue_timeout rounded up), %s", a, reducedCapacity)
		}
		if n := g.metric("gateway_upstream_shed_total", "pool", "legacy", "priority", "sheddable"); n != 1 {
			t.Fatalf("gateway_upstream_shed_total{priority=sheddable} %v, want 1", n)
		}
		up.let(1)
		receive(t, first)
		if got := strings.Join(g.outcomes(), " "); got != "shed allowed" {
			t.Fatalf("access log outcomes %q", got)
		}
		if up.arrived.Load() != 1 {
			t.Fatal("the shed request reached the upstream")
		}
	})
	t.Run("a request still waiting at queue_timeout gets 503", func(t *testing.T) {
		up := newGatedUpstream(t)
		g := newOverloadGateway(t, proxy.Pool{Name: "legacy", Targets: []string{up.URL},
			Overload: &overload.Options{MaxInFlight: 1, Queue: 4, QueueTimeout: 50 * time.Millisecond}})
		first := g.async(context.Background(), "/default", "a")
		eventually(t, "the first request reaches the upstream", func() bool { return up.arrived.Load() == 1 })
		if a := g.request(context.Background(), "/critical", "b"); a.status != 503 || a.problem != reducedCapacity || a.retryAfter != "1" {
			t.Fatalf("timed-out request: %+v", a)
		}
		if n := g.metric("gateway_upstream_shed_total", "pool", "legacy", "priority", "critical"); n != 1 {
			t.Fatalf("gateway_upstream_shed_total{priority=critical} %v, want 1", n)
		}
		up.let(1)
		receive(t, first)
	})
	t.Run("a critical arrival displaces a free plan's request from a full queue, and the freed slot goes to it", func(t *testing.T) {
		up := newGatedUpstream(t)
		g := newOverloadGateway(t, proxy.Pool{Name: "legacy", Targets: []string{up.URL},
			Overload: &overload.Options{MaxInFlight: 1, Queue: 1, QueueTimeout: 10 * time.Second}})
		first := g.async(context.Background(), "/default", "a")
		eventually(t, "the first request reaches the upstream", func() bool { return up.arrived.Load() == 1 })
		free := g.async(context.Background(), "/batch", "free:b")
		eventually(t, "the free plan's request queues", func() bool { return g.queued() == 1 })
		critical := g.async(context.Background(), "/critical", "c")
		if a := receive(t, free); a.status != 503 || a.problem != reducedCapacity {
			t.Fatalf("free plan's request: %+v, want shed", a)
		}
		up.let(2)
		for _, ch := range []<-chan answer{first, critical} {
			if a := receive(t, ch); a.status != 200 {
				t.Fatalf("status %d", a.status)
			}
		}
	})
	t.Run("a client that leaves while queued frees its place at once and is logged as client_closed", func(t *testing.T) {
		up := newGatedUpstream(t)
		g := newOverloadGateway(t, proxy.Pool{Name: "legacy", Targets: []string{up.URL},
			Overload: &overload.Options{MaxInFlight: 1, Queue: 1, QueueTimeout: time.Minute}})
		first := g.async(context.Background(), "/default", "a")
		eventually(t, "the first request reaches the upstream", func() bool { return up.arrived.Load() == 1 })
		ctx, cancel := context.WithCancel(context.Background())
		leaver := g.async(ctx, "/default", "b")
		eventually(t, "the second request queues", func() bool { return g.queued() == 1 })
		cancel()
		receive(t, leaver)
		eventually(t, "the queue empties", func() bool { return g.queued() == 0 })
		third := g.async(context.Background(), "/default", "c")
		eventually(t, "the third request takes the freed place", func() bool { return g.queued() == 1 })
		up.let(2)
		for _, ch := range []<-chan answer{first, third} {
			if a := receive(t, ch); a.status != 200 {
				t.Fatalf("status %d", a.status)
			}
		}
		eventually(t, "the leaver is logged", func() bool { return strings.Contains(strings.Join(g.outcomes(), " "), "client_closed") })
	})
	t.Run("a pool without an overload block reports no limit and queues nothing", func(t *testing.T) {
		up := newGatedUpstream(t)
		g := newOverloadGateway(t, proxy.Pool{Name: "legacy", Targets: []string{up.URL}})
		var pending []<-chan answer
		for range 8 {
			pending = append(pending, g.async(context.Background(), "/batch", "free:a"))
		}
		eventually(t, "every request reaches the upstream", func() bool { return up.arrived.Load() == 8 })
		up.openUp()
		for _, ch := range pending {
			if a := receive(t, ch); a.status != 200 {
				t.Fatalf("status %d", a.status)
			}
		}
		families, _ := g.registry.Gather()
		for _, f := range families {
			if name := f.GetName(); name == "gateway_upstream_limit" || name == "gateway_upstream_queued" || name == "gateway_upstream_shed_total" {
				t.Fatalf("%s reported for a pool without an overload block", name)
			}
		}
	})
}

// A reload refused for a fault found after its pools were built (a route
// naming no pool) leaves the controller of a pool it would have kept as
// it was: on error the configuration in force stays whole.
func TestOverloadRefusedReloadLeavesTheControllerAlone(t *testing.T) {
	up := newGatedUpstream(t)
	up.openUp()
	pool := proxy.Pool{Name: "legacy", Targets: []string{up.URL},
		Overload: &overload.Options{MaxInFlight: 1, Queue: 1}}
	g := newOverloadGateway(t, pool)
	limit := func() float64 { return g.metric("gateway_upstream_limit", "pool", "legacy") }
	cfg := g.cfg
	pool.Overload = &overload.Options{MaxInFlight: 500, Queue: 5000}
	cfg.Pools = []proxy.Pool{pool}
	bad := cfg.Routes[0]
	bad.OperationID, bad.Path, bad.Pool = "broken", "/broken", "no-such-pool"
	cfg.Routes = append(append([]proxy.Route(nil), cfg.Routes...), bad)
	if err := g.handler.Swap(cfg); err == nil {
		t.Fatal("a route naming no pool was accepted")
	}
	if l := limit(); l != 1 {
		t.Fatalf("limit %v after a refused reload, want 1: the controller took the refused numbers", l)
	}
	cfg.Routes = cfg.Routes[:len(cfg.Routes)-1]
	if err := g.handler.Swap(cfg); err != nil {
		t.Fatal(err)
	}
	if l := limit(); l != 500 {
		t.Fatalf("limit %v after the reload took, want 500", l)
	}
}

func TestOverloadReloadRemovingTheBlock(t *testing.T) {
	t.Run("requests queued when a reload removes the block are forwarded as the old slots free, once each", func(t *testing.T) {
		up := newGatedUpstream(t)
		pool := proxy.Pool{Name: "legacy", Targets: []string{up.URL},
			Overload: &overload.Options{MaxInFlight: 1, Queue: 8, QueueTimeout: time.Minute}}
		g := newOverloadGateway(t, pool)
		first := g.async(context.Background(), "/default", "a")
		eventually(t, "the first request reaches the upstream", func() bool { return up.arrived.Load() == 1 })
		var pending []<-chan answer
		for i := range 3 {
			pending = append(pending, g.async(context.Background(), "/default", string(rune('b'+i))))
			eventually(t, "the request queues", func() bool { return g.queued() == float64(i+1) })
		}
		pool.Overload = nil
		cfg := g.cfg
		cfg.Pools = []proxy.Pool{pool}
		if err := g.handler.Swap(cfg); err != nil {
			t.Fatal(err)
		}
		// New requests are no longer limited.
		after := g.async(context.Background(), "/default", "z")
		eventually(t, "a request after the reload reaches the upstream at once", func() bool { return up.arrived.Load() == 2 })
		up.openUp()
		for _, ch := range append(pending, first, after) {
			if a := receive(t, ch); a.status != 200 {
				t.Fatalf("status %d", a.status)
			}
		}
		if n := up.arrived.Load(); n != 5 {
			t.Fatalf("the upstream saw %d requests, want 5", n)
		}
	})
}

func TestOverloadFaults(t *testing.T) {
	t.Run("a pool whose every target is out of rotation answers 502 at once, at its limit or not", func(t *testing.T) {
		up := newToggled(t)
		g := newOverloadGateway(t, proxy.Pool{Name: "legacy", Targets: []string{up.URL},
			Health:   &proxy.HealthCheck{Path: "/healthz", Interval: 20 * time.Millisecond},
			Overload: &overload.Options{MaxInFlight: 1, Queue: 4, QueueTimeout: time.Minute}})
		up.healthy.Store(false)
		eventually(t, "the target is ejected", func() bool { return g.metric("gateway_upstream_ejected", "target", up.URL) == 1 })
		release := proxy.HoldSlots(g.handler, "legacy", 1)
		defer release()
		for range 3 {
			if a := g.request(context.Background(), "/critical", "a"); a.status != 502 {
				t.Fatalf("status %d, want 502", a.status)
			}
		}
		if g.queued() != 0 {
			t.Fatal("requests to a pool without a target queued")
		}
	})
	t.Run("a backend that hangs: the queue drains by timeout and nothing stays behind", func(t *testing.T) {
		hang := make(chan struct{})
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		}))
		t.Cleanup(func() { close(hang); up.Close() })
		g := newOverloadGateway(t, proxy.Pool{Name: "legacy", Targets: []string{up.URL}, ResponseTimeout: 200 * time.Millisecond,
			Overload: &overload.Options{Adaptive: true, MinLimit: 2, MaxInFlight: 4, Queue: 16, QueueTimeout: 20 * time.Millisecond}})
		round := func() map[int]int {
			var wg sync.WaitGroup
			var mu sync.Mutex
			counts := map[int]int{}
			for i := range 40 {
				wg.Go(func() {
					a := g.request(context.Background(), "/default", string(rune('a'+i%8)))
					mu.Lock()
					counts[a.status]++
					mu.Unlock()
				})
			}
			wg.Wait()
			return counts
		}
		round()
		http.DefaultClient.CloseIdleConnections()
		var heap runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&heap)
		goroutines, before := runtime.NumGoroutine(), heap.HeapInuse
		for range 5 {
			counts := round()
			if counts[503]+counts[504] != 40 {
				t.Fatalf("answers %v, want only 503 (shed) and 504 (the backend's timeout)", counts)
			}
		}
		eventually(t, "the queue drains", func() bool { return g.queued() == 0 })
		http.DefaultClient.CloseIdleConnections()
		eventually(t, "goroutines come back to where they were", func() bool { return runtime.NumGoroutine() <= goroutines })
		runtime.GC()
		runtime.ReadMemStats(&heap)
		if heap.HeapInuse > before+4<<20 {
			t.Fatalf("heap in use grew from %d to %d bytes over 200 requests", before, heap.HeapInuse)
		}
	})
	t.Run("a reload while requests are queued loses none and admits none twice", func(t *testing.T) {
		up := newGatedUpstream(t)
		pool := proxy.Pool{Name: "legacy", Targets: []string{up.URL},
			Overload: &overload.Options{MaxInFlight: 1, Queue: 8, QueueTimeout: time.Minute}}
		g := newOverloadGateway(t, pool)
		first := g.async(context.Background(), "/default", "a")
		eventually(t, "the first request reaches the upstream", func() bool { return up.arrived.Load() == 1 })
		var pending []<-chan answer
		for i := range 4 {
			pending = append(pending, g.async(context.Background(), "/default", string(rune('b'+i))))
			eventually(t, "the request queues", func() bool { return g.queued() == float64(i+1) })
		}
		// New numbers: the controller is kept, with its queue and its one
		// request in flight; the limit of 2 admits one waiter at once.
		pool.Overload = &overload.Options{MaxInFlight: 2, Queue: 2, QueueTimeout: time.Minute}
		cfg := g.cfg
		cfg.Pools = []proxy.Pool{pool}
		if err := g.handler.Swap(cfg); err != nil {
			t.Fatal(err)
		}
		eventually(t, "a waiter takes the second slot", func() bool { return up.arrived.Load() == 2 })
		if q := g.queued(); q != 3 {
			t.Fatalf("queued %v after the reload, want 3", q)
		}
		// A new arrival finds the queue over its new size.
		if a := g.request(context.Background(), "/default", "z"); a.status != 503 {
			t.Fatalf("arrival to a queue over its new size: %d, want 503", a.status)
		}
		up.openUp()
		for _, ch := range append(pending, first) {
			if a := receive(t, ch); a.status != 200 {
				t.Fatalf("status %d", a.status)
			}
		}
		if n := up.arrived.Load(); n != 5 {
			t.Fatalf("the upstream saw %d requests, want 5", n)
		}
	})
}

// BenchmarkOverloadRequestPath is BenchmarkRequestPath's allowed and
// unlimited cases through a pool without an overload block, with a static
// limit and with an adaptive one, never reached: the block's cost under
// its limit is the difference (on an unlimited route it includes the
// client's pseudonym, which a limited route has already).
func BenchmarkOverloadRequestPath(b *testing.B) {
	for _, route := range []struct {
		name   string
		policy *limiter.Policy
	}{
		{"allowed", limitertest.FixedWindow(1<<40, time.Hour)},
		{"unlimited", nil},
	} {
		for _, block := range []struct {
			name     string
			overload *overload.Options
		}{
			{"without_block", nil},
			{"static_limit", &overload.Options{MaxInFlight: 64}},
			{"adaptive_limit", &overload.Options{Adaptive: true, MaxInFlight: 64}},
		} {
			b.Run(route.name+"/"+block.name, func(b *testing.B) {
				m := limiter.NewMemory(limiter.MemoryOptions{})
				defer m.Close()
				if route.policy != nil {
					route.policy.Dedup = limiter.Dedup{}
				}
				h, err := proxy.NewHandler(proxy.Options{Transport: &countingTransport{}}, proxy.Config{
					Routes: []proxy.Route{{OperationID: "orders.read", Path: "/orders", Pool: "legacy", Policies: onePolicy(route.policy),
						Subject: []subject.Kind{subject.ClientIP}, Cost: 1}},
					Pools:    []proxy.Pool{{Name: "legacy", Targets: []string{"http://upstream.invalid"}, Overload: block.overload}},
					Resolver: newResolver(b, nil), Limiter: m,
				})
				if err != nil {
					b.Fatal(err)
				}
				defer h.Close()
				benchServe(b, h, 100, 200)
			})
		}
	}
}

// Only the pool's answers are samples of its latency: answers the
// gateway writes itself after admitting a request (here 413, a chunked
// body over max_body_bytes, in well under a millisecond) leave the
// adaptive limit where the backend's own latency put it, however many a
// client sends at once.
func TestOverloadAdaptiveLimitLearnsOnlyFromThePool(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(20 * time.Millisecond)
	}))
	t.Cleanup(up.Close)
	g := newOverloadGateway(t, proxy.Pool{Name: "legacy", Targets: []string{up.URL},
		Overload: &overload.Options{Adaptive: true, MinLimit: 2, MaxInFlight: 64, Queue: 1024, QueueTimeout: 10 * time.Second}},
		func(cfg *proxy.Config) { cfg.Routes[2].MaxBodyBytes = 16 }) // batch
	// The probe: the backend's latency unloaded, from 16 requests.
	for range 16 {
		if a := g.request(t.Context(), "/default", "alice"); a.status != http.StatusOK {
			t.Fatalf("probe: %d %v", a.status, a.err)
		}
	}
	var wg sync.WaitGroup
	var tooLarge atomic.Int64
	for range 8 {
		wg.Go(func() {
			for range 100 {
				body := io.NopCloser(strings.NewReader(strings.Repeat("x", 4096))) // no length: chunked
				req, _ := http.NewRequestWithContext(t.Context(), "POST", g.URL+"/batch", body)
				req.Header.Set("X-Auth-Principal", "mallory")
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					continue
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode == http.StatusRequestEntityTooLarge {
					tooLarge.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if tooLarge.Load() < 400 {
		t.Fatalf("%d of 800 bodies over the limit answered 413: the test proves nothing", tooLarge.Load())
	}
	if l := g.metric("gateway_upstream_limit", "pool", "legacy"); l != 2 {
		t.Fatalf("gateway_upstream_limit %v after 800 answers of the gateway's own, want 2: they were taken for the backend's latency", l)
	}
}

// An upstream's failures are samples of its latency when no faster than
// its unloaded latency: one that fails slowly (here it holds each request
// 100 ms and drops the connection: 502) is an overloaded backend, and the
// adaptive limit falls; failures at once say nothing of its load, and
// leave the limit where it was.
func TestOverloadAdaptiveLimitLearnsFromSlowFailuresOnly(t *testing.T) {
	for _, c := range []struct {
		name    string
		failing time.Duration // how long a failure takes
		falls   bool
	}{
		{"failures after 100 ms", 100 * time.Millisecond, true},
		{"failures at once", 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var failing atomic.Bool
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if failing.Load() {
					time.Sleep(c.failing)
					panic(http.ErrAbortHandler)
				}
				time.Sleep(20 * time.Millisecond)
			}))
			up.Config.ErrorLog = log.New(io.Discard, "", 0)
			t.Cleanup(up.Close)
			pool := proxy.Pool{Name: "legacy", Targets: []string{up.URL},
				Overload: &overload.Options{Adaptive: true, MinLimit: 8, MaxInFlight: 64, Queue: 1024, QueueTimeout: 10 * time.Second}}
			g := newOverloadGateway(t, pool)
			for range 16 { // the probe, at 8: 20 ms unloaded
				g.request(t.Context(), "/default", "alice")
			}
			// A lower floor, the limit learnt kept: 8.
			pool.Overload = &overload.Options{Adaptive: true, MinLimit: 2, MaxInFlight: 64, Queue: 1024, QueueTimeout: 10 * time.Second}
			cfg := g.cfg
			cfg.Pools = []proxy.Pool{pool}
			if err := g.handler.Swap(cfg); err != nil {
				t.Fatal(err)
			}
			limit := func() float64 { return g.metric("gateway_upstream_limit", "pool", "legacy") }
			if l := limit(); l != 8 {
				t.Fatalf("limit %v after the probe, want 8", l)
			}
			failing.Store(true)
			ctx, cancel := context.WithCancel(t.Context())
			var wg sync.WaitGroup
			for i := range 32 {
				wg.Go(func() {
					for ctx.Err() == nil {
						g.request(ctx, "/default", fmt.Sprint("tenant-", i))
					}
				})
			}
			defer wg.Wait()
			defer cancel()
			if !c.falls {
				time.Sleep(2 * time.Second)
				if l := limit(); l > 8 {
					t.Fatalf("limit %v after 2 s of failures at once, want at most 8: they were taken for a fast backend", l)
				}
				return
			}
			for deadline := time.Now().Add(20 * time.Second); limit() > 4; time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("limit %v after 20 s of an upstream failing after 100 ms, want at most 4", limit())
				}
			}
		})
	}
}
