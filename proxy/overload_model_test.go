package proxy_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgegate/gateway/overload"
	"github.com/edgegate/gateway/proxy"
)

// modelBackend models a legacy backend: workers serving one request each
// for service, and a FIFO of requests in front of them (goroutines
// waiting on a channel are served in order), so its latency grows with
// the load it is sent, as a thread pool with a backlog does.
type modelBackend struct {
	*httptest.Server
	workers chan struct{} // a token per free worker
	service time.Duration
	taken   []struct{} // workers taken out by halve
}

func newModelBackend(t testing.TB, workers int, service time.Duration) *modelBackend {
	b := &modelBackend{workers: make(chan struct{}, workers), service: service}
	for range workers {
		b.workers <- struct{}{}
	}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-b.workers:
		case <-r.Context().Done():
			return
		}
		time.Sleep(b.service)
		b.workers <- struct{}{}
		w.Write([]byte("done"))
	}))
	t.Cleanup(b.Close)
	return b
}

// halve takes half the workers out, as they come free.
func (b *modelBackend) halve() {
	for range cap(b.workers) / 2 {
		b.taken = append(b.taken, <-b.workers)
	}
}

// restore gives the workers halve took back.
func (b *modelBackend) restore() {
	for range b.taken {
		b.workers <- struct{}{}
	}
	b.taken = nil
}

// tenant is one source of the offered load: a principal (with "free:",
// on the free plan) sending to path at rate requests a second, whatever
// the answers (an open loop, as real clients under overload are).
type tenant struct {
	name, path string
	rate       float64

	mu        sync.Mutex
	sent, ok  int
	latencies []time.Duration // of the 2xx answers
	statuses  map[int]int
}

// drive sends t's load to g until ctx ends; measuring reports whether an
// answer that comes now counts.
func (tn *tenant) drive(ctx context.Context, g *overloadGateway, client *http.Client, measuring func() bool, wg *sync.WaitGroup) {
	defer wg.Done()
	tick := time.NewTicker(time.Duration(float64(time.Second) / tn.rate))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			req, _ := http.NewRequest("GET", g.URL+tn.path, nil)
			req.Header.Set("X-Auth-Principal", tn.name)
			if tn.path == "/batch" {
				req.Header.Set("X-Auth-Plan", "free")
			}
			status := 0
			if res, err := client.Do(req); err == nil {
				res.Body.Close()
				status = res.StatusCode
			}
			took := time.Since(start)
			if !measuring() {
				return // answered outside the measured time
			}
			tn.mu.Lock()
			defer tn.mu.Unlock()
			tn.sent++
			tn.statuses[status]++
			if status/100 == 2 {
				tn.ok++
				tn.latencies = append(tn.latencies, took)
			}
		}()
	}
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// TestOverloadProtectsALegacyBackend offers a modelled legacy backend (8
// workers, 20 ms a request: 400 requests a second) three times its
// capacity from tenants of every priority, one of them flooding, and
// checks what the overload block promises: goodput, critical requests
// answered fast, the flood held to its fair share, and a limit that
// follows the backend's capacity down and up. bench/ runs it for 30 s
// beside the same load without the block.
func TestOverloadProtectsALegacyBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("offers load for about 8 s")
	}
	const (
		workers  = 8
		service  = 20 * time.Millisecond
		capacity = float64(workers) * float64(time.Second/service) // 400/s
		measure  = 4 * time.Second
	)
	b := newModelBackend(t, workers, service)
	g := &overloadGateway{poolGateway: &poolGateway{registry: prometheus.NewRegistry(), logs: &syncBuffer{}, t: t}}
	g.cfg = overloadConfig(t, proxy.Pool{Name: "legacy", Targets: []string{b.URL},
		Overload: &overload.Options{Adaptive: true, MinLimit: 4, MaxInFlight: 64, Queue: 64, QueueTimeout: 500 * time.Millisecond}})
	h, err := proxy.NewHandler(proxy.Options{Logger: slog.New(slog.DiscardHandler), Metrics: proxy.NewMetrics(g.registry)}, g.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	g.handler, g.Server = h, httptest.NewServer(h)
	t.Cleanup(g.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}, Timeout: 10 * time.Second}
	t.Cleanup(client.CloseIdleConnections)

	var unloaded []time.Duration
	for range 20 {
		start := time.Now()
		if a := g.request(context.Background(), "/critical", "probe"); a.status != 200 {
			t.Fatalf("unloaded request: %d", a.status)
		}
		unloaded = append(unloaded, time.Since(start))
	}
	base := percentile(unloaded, 0.5)

	tenants := []*tenant{
		{name: "checkout", path: "/critical", rate: 0.2 * capacity},
		{name: "orders-a", path: "/default", rate: 0.25 * capacity},
		{name: "orders-b", path: "/default", rate: 0.25 * capacity},
		{name: "flood", path: "/batch", rate: 2.1 * capacity},
		{name: "light", path: "/batch", rate: 0.2 * capacity},
	}
	var measuringMu sync.Mutex
	measuringNow := false
	measuring := func() bool { measuringMu.Lock(); defer measuringMu.Unlock(); return measuringNow }
	setMeasuring := func(v bool) { measuringMu.Lock(); measuringNow = v; measuringMu.Unlock() }
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	for _, tn := range tenants {
		tn.statuses = map[int]int{}
		wg.Add(1)
		go tn.drive(ctx, g, client, measuring, &wg)
	}
	limit := func() float64 { return g.metric("gateway_upstream_limit", "pool", "legacy") }

	// Warm up: the first probe, and the limit's climb from min_limit.
	time.Sleep(time.Second)
	setMeasuring(true)
	var limits []float64
	for end := time.Now().Add(measure); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		limits = append(limits, limit())
	}
	setMeasuring(false)
	wg.Add(1) // the drivers' group must not reach zero while it is read
	var total, shedOK, shedTotal int
	report := ""
	for _, tn := range tenants {
		tn.mu.Lock()
		total += tn.ok
		if tn.path == "/batch" {
			shedOK += tn.ok
		}
		report += fmt.Sprintf("\n  %-9s %-9s offered %4.0f/s: %4.0f/s 2xx, statuses %v, p99 %v", tn.name, tn.path, tn.rate, float64(tn.ok)/measure.Seconds(), tn.statuses, percentile(tn.latencies, 0.99))
		tn.mu.Unlock()
	}
	wg.Done()
	shedTotal = shedOK
	slices.Sort(limits)
	t.Logf("unloaded latency %v; limit %v to %v (median %v)%s", base, limits[0], limits[len(limits)-1], limits[len(limits)/2], report)

	goodput := float64(total) / measure.Seconds()
	if goodput < 0.9*capacity {
		t.Errorf("goodput %.0f/s, want at least 90%% of %.0f/s", goodput, capacity)
	}
	checkout, light, flood := tenants[0], tenants[4], tenants[3]
	if checkout.sent == 0 || float64(checkout.ok) < 0.99*float64(checkout.sent) {
		t.Errorf("critical: %d of %d answered 2xx, want 99%%", checkout.ok, checkout.sent)
	}
	if p99 := percentile(checkout.latencies, 0.99); p99 > 3*base {
		t.Errorf("critical p99 %v, want at most 3 × the unloaded %v", p99, base)
	}
	// Max-min fairness within the sheddable priority: the light tenant
	// gets its demand or half of what the priority got, and the flood
	// the rest, no more.
	lightOffered := light.rate * measure.Seconds()
	fair := max(float64(shedTotal)/2, float64(shedTotal)-lightOffered)
	if float64(flood.ok) > 1.1*fair {
		t.Errorf("the flooding tenant got %d answers, above its fair share %.0f of the sheddable priority's %d", flood.ok, fair, shedTotal)
	}

	// Half the workers go: the limit falls within 5 s, then comes back
	// with them.
	before := limits[len(limits)/2]
	b.halve()
	halved := time.Now()
	for limit() > 0.75*before {
		if time.Since(halved) > 5*time.Second {
			t.Fatalf("the limit is %v 5 s after the backend's capacity halved, from %v", limit(), before)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("capacity halved: the limit fell from %v to %v in %v", before, limit(), time.Since(halved).Round(time.Millisecond))
	time.Sleep(time.Second)
	low := limit()
	b.restore()
	restored := time.Now()
	for limit() < 0.9*before {
		if time.Since(restored) > 5*time.Second {
			t.Fatalf("the limit is %v 5 s after the backend's capacity came back, from %v", limit(), low)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("capacity restored: the limit rose from %v to %v in %v", low, limit(), time.Since(restored).Round(time.Millisecond))
}
