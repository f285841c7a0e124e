package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The latency series, as a scrape of a running gateway shows them after
// real requests: allowed and denied ones on a route, one no route matched,
// and one held by the upstream while the scrape runs.
func TestLatencyHistogramsAreExported(t *testing.T) {
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/orders/held" {
			arrived <- struct{}{}
			<-release
		}
		time.Sleep(10 * time.Millisecond)
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	r := start(t, up.URL)
	pool := up.URL // a route naming a URL has a pool of that one target, named by it

	if got := statusesOf(t, r, 1); got != "200" {
		t.Fatalf("first request: %s", got)
	}
	held := make(chan int)
	go func() {
		res, err := http.Get("http://" + r.servers.HTTPAddr().String() + "/orders/held")
		if err != nil {
			held <- 0
			return
		}
		res.Body.Close()
		held <- res.StatusCode
	}()
	<-arrived
	if v := r.metricValue(t, `gateway_requests_in_flight{route="orders.read"}`); v != 1 {
		t.Errorf("in flight while the upstream holds one request: %v, want 1", v)
	}
	close(release)
	if code := <-held; code != 200 {
		t.Fatalf("held request: %d", code)
	}
	if got := statusesOf(t, r, 1); got != "429" {
		t.Fatalf("third request: %s", got)
	}
	if s := r.get(t, "/nowhere").StatusCode; s != 404 {
		t.Fatalf("unrouted request: %d", s)
	}

	for series, want := range map[string]float64{
		`gateway_request_duration_seconds_count{outcome="allowed",route="orders.read"}`:          2,
		`gateway_request_duration_seconds_count{outcome="denied",route="orders.read"}`:           1,
		`gateway_request_duration_seconds_count{outcome="no_route",route="none"}`:                1,
		`gateway_requests_in_flight{route="orders.read"}`:                                        0,
		`gateway_upstream_duration_seconds_count{pool="` + pool + `"}`:                           2,
		`gateway_upstream_duration_seconds_bucket{pool="` + pool + `",le="0.005"}`:               0,
		`gateway_upstream_duration_seconds_bucket{pool="` + pool + `",le="10"}`:                  2,
		`gateway_request_duration_seconds_bucket{outcome="allowed",route="orders.read",le="10"}`: 2,
	} {
		if v := r.metricValue(t, series); v != want {
			t.Errorf("%s = %v, want %v", series, v, want)
		}
	}
	// Each upstream exchange took at least the upstream's 10ms, and the
	// whole request at least as long.
	if v := r.metricValue(t, `gateway_upstream_duration_seconds_sum{pool="`+pool+`"}`); v < 0.02 {
		t.Errorf("upstream duration sum %v, want at least 0.02", v)
	}
	if v := r.metricValue(t, `gateway_request_duration_seconds_sum{outcome="allowed",route="orders.read"}`); v < 0.02 {
		t.Errorf("request duration sum %v, want at least 0.02", v)
	}
	// OpenTelemetry's advised boundaries, 5 ms to 10 s, on both histograms.
	_, body := r.admin(t, "/metrics")
	for _, name := range []string{"gateway_request_duration_seconds_bucket", "gateway_upstream_duration_seconds_bucket"} {
		var bounds []string
		for line := range strings.SplitSeq(body, "\n") {
			if strings.HasPrefix(line, name+"{") && strings.Contains(line, `route="orders.read"`) == (name == "gateway_request_duration_seconds_bucket") &&
				!strings.Contains(line, `outcome="denied"`) {
				_, le, _ := strings.Cut(line, `le="`)
				le, _, _ = strings.Cut(le, `"`)
				bounds = append(bounds, le)
			}
		}
		want := "0.005 0.01 0.025 0.05 0.075 0.1 0.25 0.5 0.75 1 2.5 5 7.5 10 +Inf"
		if got := strings.Join(bounds, " "); got != want {
			t.Errorf("%s bounds %q, want %q", name, got, want)
		}
	}
}
