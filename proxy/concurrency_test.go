package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
)

// slowUpstream holds every request until release is closed, and records
// how many it held at once.
type slowUpstream struct {
	*httptest.Server
	release chan struct{}
	once    sync.Once
	now     atomic.Int64
	peak    atomic.Int64
	seen    atomic.Int64
}

func newSlowUpstream(t *testing.T) *slowUpstream {
	u := &slowUpstream{release: make(chan struct{})}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := u.now.Add(1)
		defer u.now.Add(-1)
		u.seen.Add(1)
		for p := u.peak.Load(); n > p && !u.peak.CompareAndSwap(p, n); p = u.peak.Load() {
		}
		select {
		case <-u.release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "report")
	}))
	t.Cleanup(u.Close)
	t.Cleanup(u.letGo) // first: Close waits for the requests it holds
	return u
}

// letGo answers every request held, and every one to come.
func (u *slowUpstream) letGo() { u.once.Do(func() { close(u.release) }) }

// cutConnection closes the connection of the response w writes, as an
// upstream that fails does.
func cutConnection(w http.ResponseWriter) {
	if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
		c.Close()
	}
}

// waitFor polls cond until it holds or 10 seconds pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func concurrencyRoute(t *testing.T, u string, ps ...*limiter.Policy) proxy.Route {
	return proxy.Route{OperationID: "reports", Path: "/", Upstream: u, Policies: ps,
		Subject: []subject.Kind{subject.Principal, subject.ClientIP}, Cost: 1, Upgrades: []string{"echo"}}
}

// onEachBackend runs test against a memory backend and a standalone Redis.
func onEachBackend(t *testing.T, test func(t *testing.T, lim proxy.Limiter)) {
	t.Run("memory", func(t *testing.T) {
		m := limiter.NewMemory(limiter.MemoryOptions{})
		t.Cleanup(func() { m.Close() })
		test(t, m)
	})
	t.Run("redis", func(t *testing.T) {
		s := redistest.Start(t)
		test(t, redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}}))
	})
}

func TestConcurrencyLimitOverHTTP(t *testing.T) { onEachBackend(t, tenAtOnceLimitThree) }

// tenAtOnceLimitThree sends 10 requests at once to a slow upstream behind
// a concurrency limit of 3: the upstream holds exactly 3, the other 7 are
// refused with the concurrency headers, and once the 3 are answered every
// lease is back.
func tenAtOnceLimitThree(t *testing.T, lim proxy.Limiter) {
	up := newSlowUpstream(t)
	m := proxy.NewMetrics(prometheus.NewRegistry())
	p := policy(limitertest.Concurrency(3, 30*time.Second), "in-flight")
	p.Clock = limiter.ClockBackend
	g := newGateway(t, setup{routes: []proxy.Route{concurrencyRoute(t, up.URL, p)}, metrics: m, limiter: lim})
	held := m.LeasesHeld.WithLabelValues("reports", "in-flight")

	var wg sync.WaitGroup
	results := make(chan *http.Response, 10)
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := http.Get(g.URL + "/report")
			if err != nil {
				t.Error(err)
				return
			}
			io.ReadAll(res.Body)
			res.Body.Close()
			results <- res
		}()
	}
	refused := 0
	waitFor(t, "the upstream holds 3 requests and 7 are refused", func() bool {
		for {
			select {
			case res := <-results:
				if res.StatusCode != http.StatusTooManyRequests {
					t.Fatalf("status %d before any request was let go, want 429", res.StatusCode)
				}
				refused++
				if got := res.Header.Get("Retry-After"); got != "1" {
					t.Errorf("Retry-After %q, want 1", got)
				}
				if got, want := res.Header.Get("RateLimit-Policy"), `"in-flight";q=3;qu="concurrent-requests"`; got != want {
					t.Errorf("RateLimit-Policy %q, want %q", got, want)
				}
				if got, want := res.Header.Get("RateLimit"), `"in-flight";r=0`; got != want {
					t.Errorf("RateLimit %q, want %q", got, want)
				}
				continue
			default:
			}
			return refused == 7 && up.now.Load() == 3
		}
	})
	if n := testutil.ToFloat64(held); n != 3 {
		t.Errorf("gateway_limiter_leases_held = %v with 3 requests upstream, want 3", n)
	}
	up.letGo()
	wg.Wait()
	close(results)
	for res := range results {
		if res.StatusCode != 200 {
			t.Errorf("a held request got %d, want 200", res.StatusCode)
		}
	}
	if peak, seen := up.peak.Load(), up.seen.Load(); peak != 3 || seen != 3 {
		t.Fatalf("the upstream held %d at once and saw %d, want 3 and 3", peak, seen)
	}
	if n := testutil.ToFloat64(held); n != 0 {
		t.Fatalf("gateway_limiter_leases_held = %v after every response, want 0", n)
	}
	waitFor(t, "every lease is free again", func() bool {
		res := g.get(t, "/after")
		return res.StatusCode == 200 && res.Header.Get("RateLimit") == `"in-flight";r=2`
	})
}

// TestConcurrencyLeaseEndsWithTheResponse: a lease is given back however
// the response ends; a limit of 1 shows it, since the next request is
// admitted only once the lease is back.
func TestConcurrencyLeaseEndsWithTheResponse(t *testing.T) {
	newConcurrencyGateway := func(t *testing.T, h http.HandlerFunc) (*gateway, *proxy.Metrics) {
		up := httptest.NewServer(h)
		t.Cleanup(up.Close)
		m := proxy.NewMetrics(prometheus.NewRegistry())
		g := newGateway(t, setup{routes: []proxy.Route{concurrencyRoute(t, up.URL, policy(limitertest.Concurrency(1, 30*time.Second), "one"))}, metrics: m})
		return g, m
	}
	free := func(t *testing.T, g *gateway, m *proxy.Metrics) {
		t.Helper()
		waitFor(t, "the lease is given back", func() bool {
			return testutil.ToFloat64(m.LeasesHeld.WithLabelValues("reports", "one")) == 0
		})
		if res := g.get(t, "/next", "X-Next", "1"); res.StatusCode != 200 && res.StatusCode != 502 {
			t.Fatalf("the next request got %d: the lease was not given back", res.StatusCode)
		}
	}
	t.Run("the upstream cuts the body off (ReverseProxy aborts with ErrAbortHandler)", func(t *testing.T) {
		g, m := newConcurrencyGateway(t, func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Next") != "" {
				return
			}
			w.Header().Set("Content-Length", "100")
			w.Write([]byte("part"))
			http.NewResponseController(w).Flush()
			cutConnection(w)
		})
		req, _ := http.NewRequest("GET", g.URL+"/cut", nil)
		if res, err := http.DefaultClient.Do(req); err == nil {
			io.ReadAll(res.Body)
			res.Body.Close()
		}
		free(t, g, m)
	})
	t.Run("the upstream fails", func(t *testing.T) {
		g, m := newConcurrencyGateway(t, func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Next") == "" {
				cutConnection(w)
			}
		})
		if res := g.get(t, "/fail"); res.StatusCode != http.StatusBadGateway {
			t.Fatalf("status %d, want 502", res.StatusCode)
		}
		free(t, g, m)
	})
	t.Run("the client goes away", func(t *testing.T) {
		started := make(chan struct{}, 1)
		g, m := newConcurrencyGateway(t, func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Next") != "" {
				return
			}
			started <- struct{}{}
			<-r.Context().Done()
		})
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", g.URL+"/gone", nil)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if res, err := http.DefaultClient.Do(req); err == nil {
				res.Body.Close()
			}
		}()
		<-started
		if res := g.get(t, "/meanwhile", "X-Next", "1"); res.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("a second request while the first is upstream got %d, want 429", res.StatusCode)
		}
		cancel()
		<-done
		free(t, g, m)
	})
	t.Run("an upgraded tunnel holds its lease until it closes", func(t *testing.T) {
		g, m := newConcurrencyGateway(t, func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Upgrade") == "echo" {
				echoUpgrade(w)
			}
		})
		c := openEcho(t, g, 10*time.Second)
		if res := g.get(t, "/meanwhile"); res.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("a request while the tunnel is open got %d, want 429", res.StatusCode)
		}
		c.Close()
		free(t, g, m)
	})
}

// TestConcurrencyLeaseIsRenewedWhileTheRequestLasts: a request open past
// its lease TTL keeps its lease, renewed every third of it; without the
// renewal the lease would be void after 1s and a second request admitted.
func TestConcurrencyLeaseIsRenewedWhileTheRequestLasts(t *testing.T) {
	up := newSlowUpstream(t)
	m := limiter.NewMemory(limiter.MemoryOptions{})
	t.Cleanup(func() { m.Close() })
	p := policy(limitertest.Concurrency(1, time.Second), "one")
	p.Clock = limiter.ClockBackend
	g := newGateway(t, setup{routes: []proxy.Route{concurrencyRoute(t, up.URL, p)}, limiter: m})
	done := make(chan int)
	go func() {
		res, err := http.Get(g.URL + "/long")
		if err != nil {
			done <- 0
			return
		}
		res.Body.Close()
		done <- res.StatusCode
	}()
	waitFor(t, "the long request is upstream", func() bool { return up.now.Load() == 1 })
	for i := range 5 {
		time.Sleep(500 * time.Millisecond) // real time: the lease TTL is the wall clock's
		if res := g.get(t, fmt.Sprintf("/probe%d", i)); res.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("%v into a request with a 1s lease, another request got %d, want 429", time.Duration(i+1)*500*time.Millisecond, res.StatusCode)
		}
	}
	up.letGo()
	if code := <-done; code != 200 {
		t.Fatalf("the long request got %d", code)
	}
	if !strings.Contains(g.logs.String(), `"outcome":"denied"`) {
		t.Fatal("no denial logged")
	}
}
