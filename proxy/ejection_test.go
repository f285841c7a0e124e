package proxy_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/edgegate/gateway/proxy"
)

// slowOnPath is a target that answers /slow after 3 s (or when the
// gateway gives up) and anything else at once.
func slowOnPath(t *testing.T) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-time.After(3 * time.Second):
			case <-r.Context().Done():
			}
		}
		w.Write([]byte("ok"))
	}))
	t.Cleanup(s.Close)
	return s.URL
}

// sendConcurrently sends n GETs of path at once and returns their statuses.
func sendConcurrently(t *testing.T, g *poolGateway, path string, n int) map[int]int {
	t.Helper()
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, g.URL+path, nil)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			res.Body.Close()
			mu.Lock()
			codes[res.StatusCode]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return codes
}

// One client's slow requests time out on every target; that alone ejects
// none of them unless the pool says eject_on_timeout, and then at most
// max_ejected_percent of them.
func TestResponseTimeoutsEjectOnlyWhenThePoolSaysSo(t *testing.T) {
	for _, c := range []struct {
		name           string
		ejectOnTimeout bool
		wantEjected    float64
	}{
		{"by default none", false, 0},
		{"with eject_on_timeout at most half of two", true, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newPoolGateway(t, proxy.Pool{Name: "legacy", Targets: []string{slowOnPath(t), slowOnPath(t)},
				ResponseTimeout: 300 * time.Millisecond, MaxFails: 3, FailTimeout: time.Minute, EjectOnTimeout: c.ejectOnTimeout})
			if codes := sendConcurrently(t, g, "/slow", 6); codes[http.StatusGatewayTimeout] != 6 {
				t.Fatalf("statuses %v, want six 504s", codes)
			}
			if n := g.metric("gateway_upstream_failures_total", "cause", "response_timeout"); n != 6 {
				t.Errorf("%v response timeouts counted, want 6", n)
			}
			if n := g.metric("gateway_upstream_ejected"); n != c.wantEjected {
				t.Errorf("%v targets ejected, want %v", n, c.wantEjected)
			}
			// Everyone else is still served.
			for i := range 4 {
				if code, _ := g.send(http.MethodGet, ""); code != http.StatusOK {
					t.Fatalf("request %d after the timeouts: %d, want 200", i, code)
				}
			}
		})
	}
}

// Failures keep at most max_ejected_percent of a pool's targets out at
// once (rounded down), and never the last one in rotation; the rest stay
// in rotation however they fail.
func TestFailuresEjectAtMostMaxEjectedPercentOfThePool(t *testing.T) {
	for _, c := range []struct {
		name        string
		percent     int
		wantEjected float64
		wantKept    string // the result of the ejections refused
	}{
		{"the default, half", 0, 2, "kept_max_ejected_percent"},
		{"a quarter", 25, 1, "kept_max_ejected_percent"},
		{"none", -1, 0, "kept_max_ejected_percent"},
		{"all but the last", 100, 3, "kept_last_target"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dead := []string{deadURL(t), deadURL(t), deadURL(t), deadURL(t)}
			g := newPoolGateway(t, proxy.Pool{Name: "legacy", Targets: dead, MaxFails: 1, FailTimeout: time.Minute, MaxEjectedPercent: c.percent})
			for i := range 12 {
				if code, _ := g.send(http.MethodPost, "x"); code != http.StatusBadGateway {
					t.Fatalf("request %d: %d, want 502", i, code)
				}
			}
			if n := g.metric("gateway_upstream_ejected"); n != c.wantEjected {
				t.Errorf("%v targets ejected, want %v", n, c.wantEjected)
			}
			if n := g.metric("gateway_upstream_ejections_total", "result", "ejected"); n != c.wantEjected {
				t.Errorf("gateway_upstream_ejections_total{result=\"ejected\"} = %v, want %v", n, c.wantEjected)
			}
			if n := g.metric("gateway_upstream_ejections_total", "result", c.wantKept); n == 0 {
				t.Errorf("no ejection refused as %s", c.wantKept)
			}
		})
	}
}
