package proxy_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgegate/gateway/internal/legacymodel"
	"github.com/edgegate/gateway/overload"
	"github.com/edgegate/gateway/proxy"
)

// TestOverloadProtectsALegacyBackend offers a modelled legacy backend (8
// workers, 20 ms a request: 400 requests a second, a FIFO in front)
// three times its capacity from tenants of every priority, one of them
// flooding, and checks what the overload block promises: goodput,
// critical requests answered fast, the flood held to its fair share, and
// a limit that follows the backend's capacity down and back up. bench/
// overload runs it for 30 s beside the same load without the block.
func TestOverloadProtectsALegacyBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("offers load for about 8 s")
	}
	if raceDetector {
		// Its figures are latencies on a two-core machine: the race
		// detector's cost would be measured, not the block's. .ci/run
		// runs it without -race.
		t.Skip("measures latency; runs without -race")
	}
	const measure = 4 * time.Second
	b, err := legacymodel.NewBackend(8, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	capacity := b.Capacity()
	g := &overloadGateway{poolGateway: &poolGateway{registry: prometheus.NewRegistry(), logs: &syncBuffer{}, t: t}}
	g.cfg = overloadConfig(t, proxy.Pool{Name: "legacy", Targets: []string{b.URL},
		Overload: &overload.Options{Adaptive: true, MinLimit: 4, MaxInFlight: 64, Queue: 64, QueueTimeout: 500 * time.Millisecond}})
	// An idle backend of the model's 20 ms behind the same gateway, on a
	// route without a limit, asked one request at a time during the
	// load: its p99 over its median is what the machine alone (other jobs
	// on a busy machine, this test's own goroutines and timers) adds to a
	// request on this path then, which no queue can take off a critical
	// request's.
	idle := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { time.Sleep(b.Service) }))
	t.Cleanup(idle.Close)
	g.cfg.Routes = append(g.cfg.Routes, proxy.Route{OperationID: "idle", Path: "/idle", Upstream: idle.URL})
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
		if a := g.request(t.Context(), "/critical", "probe"); a.status != 200 {
			t.Fatalf("unloaded request: %d", a.status)
		}
		unloaded = append(unloaded, time.Since(start))
	}
	base := legacymodel.Percentile(unloaded, 0.5)
	load := legacymodel.Start(g.URL, client, legacymodel.Scenario(capacity))
	defer load.Stop()
	limit := func() float64 { return g.metric("gateway_upstream_limit", "pool", "legacy") }
	// Warm up: the first probe, and the limit's climb from min_limit.
	time.Sleep(time.Second)
	var limits []float64
	var noise []time.Duration
	var sampling sync.WaitGroup
	sampling.Go(func() {
		for end := time.Now().Add(measure); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			limits = append(limits, limit())
		}
	})
	sampling.Go(func() {
		for end := time.Now().Add(measure); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			start := time.Now()
			if res, err := client.Get(g.URL + "/idle"); err == nil {
				res.Body.Close()
				noise = append(noise, time.Since(start))
			}
		}
	})
	served0, busy0 := b.Served()
	results := load.Measure(measure)
	served1, busy1 := b.Served()
	sampling.Wait()
	// What the backend could serve as it ran: a machine short of CPU
	// stretches its workers' 20 ms, which no gateway can make up for.
	effective := capacity
	if n := served1 - served0; n > 0 {
		effective = capacity * float64(b.Service) / float64((busy1-busy0)/time.Duration(n))
	}

	var total, sheddable int
	report := ""
	for _, r := range results {
		total += r.OK
		if r.Plan == "free" {
			sheddable += r.OK
		}
		report += fmt.Sprintf("\n  %-9s %-9s offered %4.0f/s: %4.0f/s 2xx, statuses %v, p99 %v", r.Name, r.Path, r.Rate,
			float64(r.OK)/measure.Seconds(), r.Statuses, legacymodel.Percentile(r.Latencies, 0.99))
	}
	slices.Sort(limits)
	before := limits[len(limits)/2]
	t.Logf("unloaded latency %v; the backend's capacity as it ran %.0f/s of %.0f; limit %v to %v (median %v); an idle route's p50 / p99 %v / %v%s",
		base, effective, capacity, limits[0], limits[len(limits)-1], before, legacymodel.Percentile(noise, 0.5), legacymodel.Percentile(noise, 0.99), report)

	if goodput := float64(total) / measure.Seconds(); goodput < 0.9*min(capacity, effective) {
		t.Errorf("goodput %.0f/s, want at least 90%% of the backend's %.0f/s", goodput, min(capacity, effective))
	}
	checkout, flood, light := results[0], results[3], results[4]
	if checkout.Answered == 0 || float64(checkout.OK) < 0.99*float64(checkout.Answered) {
		t.Errorf("critical: %d of %d answered 2xx, want 99%%", checkout.OK, checkout.Answered)
	}
	machine := max(legacymodel.Percentile(noise, 0.99)-legacymodel.Percentile(noise, 0.5), 0)
	if p99 := legacymodel.Percentile(checkout.Latencies, 0.99); p99 > 3*base+machine {
		t.Errorf("critical p99 %v, want at most 3 × the unloaded %v, plus the %v the machine added to an idle route's p99 over its median", p99, base, machine)
	}
	// Max-min fairness within the sheddable priority: the light tenant
	// gets its demand or half of what the priority got, the flood the
	// rest and no more.
	fair := max(float64(sheddable)/2, float64(sheddable)-light.Rate*measure.Seconds())
	if float64(flood.OK) > 1.1*fair {
		t.Errorf("the flooding tenant got %d answers, above its fair share %.0f of the sheddable priority's %d", flood.OK, fair, sheddable)
	}

	// Half the workers go: the limit falls within 5 s, then comes back
	// with them, within 10 s.
	b.Halve()
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
	b.Restore()
	restored := time.Now()
	// Back above where the fall was counted, within 10 s: on a busy
	// machine the latency the limit follows is noisier on the way up.
	for limit() <= 0.75*before {
		if time.Since(restored) > 10*time.Second {
			t.Fatalf("the limit is %v 10 s after the backend's capacity came back, from %v", limit(), low)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("capacity restored: the limit rose from %v to %v in %v", low, limit(), time.Since(restored).Round(time.Millisecond))
}
