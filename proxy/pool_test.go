package proxy_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/proxy"
)

// poolGateway is a gateway whose one route forwards to a pool, with its
// metrics and logs at hand.
type poolGateway struct {
	*httptest.Server
	handler  *proxy.Handler
	registry *prometheus.Registry
	logs     *syncBuffer
	t        *testing.T
}

func newPoolGateway(t *testing.T, p proxy.Pool) *poolGateway {
	t.Helper()
	g := &poolGateway{registry: prometheus.NewRegistry(), logs: &syncBuffer{}, t: t}
	h, err := proxy.NewHandler(proxy.Options{
		Logger:    slog.New(slog.NewJSONHandler(g.logs, nil)),
		AccessLog: true,
		Metrics:   proxy.NewMetrics(g.registry),
	}, poolConfig(t, p))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	g.handler = h
	g.Server = httptest.NewServer(h)
	t.Cleanup(g.Close)
	return g
}

func poolConfig(t *testing.T, p proxy.Pool) proxy.Config {
	m := limiter.NewMemory(limiter.MemoryOptions{})
	t.Cleanup(func() { m.Close() })
	return proxy.Config{
		Routes:   []proxy.Route{{OperationID: "orders", Path: "/", Pool: p.Name}},
		Pools:    []proxy.Pool{p},
		Resolver: newResolver(t, nil),
		Limiter:  m,
	}
}

// send makes one request and returns its status and how long it took.
func (g *poolGateway) send(method, body string) (int, time.Duration) {
	g.t.Helper()
	var r *strings.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, g.URL+"/orders", nil)
	if r != nil {
		req, err = http.NewRequest(method, g.URL+"/orders", r)
	}
	if err != nil {
		g.t.Fatal(err)
	}
	start := time.Now()
	res := do(g.t, req)
	return res.StatusCode, time.Since(start)
}

// metric is the sum of the series of name whose labels include the given
// ones (pairs), or 0 when there is none.
func (g *poolGateway) metric(name string, labels ...string) float64 {
	g.t.Helper()
	families, err := g.registry.Gather()
	if err != nil {
		g.t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
				}
				if !found {
					continue series
				}
			}
			// A histogram counts by its observations.
			sum += m.GetGauge().GetValue() + m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// targets are the targets the access log names, in order.
func (g *poolGateway) targets() []string {
	var out []string
	for line := range strings.Lines(g.logs.String()) {
		var rec struct{ Msg, Target string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "request" {
			out = append(out, rec.Target)
		}
	}
	return out
}

// deadURL is a loopback address where nothing listens: a dial is refused.
func deadURL(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	return "http://" + l.Addr().String()
}

// eventually polls cond every 10ms until it holds or 10s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRoundRobinAlternatesBetweenTwoLiveTargets(t *testing.T) {
	a, b := newUpstream(t), newUpstream(t)
	g := newPoolGateway(t, proxy.Pool{Name: "legacy", Targets: []string{a.URL, b.URL}})
	for range 10 {
		if code, _ := g.send("GET", ""); code != 200 {
			t.Fatalf("status %d", code)
		}
	}
	if a.count() != 5 || b.count() != 5 {
		t.Fatalf("a saw %d, b saw %d; want 5 each", a.count(), b.count())
	}
	got := g.targets()
	for i := 1; i < len(got); i++ {
		if got[i] == got[i-1] {
			t.Fatalf("the log names %s twice in a row: %v", got[i], got)
		}
	}
	if g.metric("gateway_upstream_requests_total", "pool", "legacy", "target", a.URL) != 5 {
		t.Errorf("requests of a: %v", g.metric("gateway_upstream_requests_total", "target", a.URL))
	}
}

func TestADeadTargetCostsAGetNothingAndIsEjected(t *testing.T) {
	live, dead := newUpstream(t), deadURL(t)
	g := newPoolGateway(t, proxy.Pool{Name: "legacy", Targets: []string{live.URL, dead}, MaxFails: 3, FailTimeout: time.Minute})
	for i := range 20 {
		if code, _ := g.send("GET", ""); code != 200 {
			t.Fatalf("request %d: status %d", i, code)
		}
	}
	if live.count() != 20 {
		t.Fatalf("the live target saw %d of 20", live.count())
	}
	if n := g.metric("gateway_upstream_failures_total", "target", dead, "cause", "refused"); n != 3 {
		t.Errorf("%v refusals counted, want max_fails = 3 and none after the ejection", n)
	}
	if n := g.metric("gateway_upstream_retries_total", "target", dead); n != 3 {
		t.Errorf("%v retries, want 3", n)
	}
	if g.metric("gateway_upstream_ejected", "target", dead) != 1 || g.metric("gateway_upstream_ejected", "target", live.URL) != 0 {
		t.Error("the ejected gauge does not say which target is out")
	}
	if !strings.Contains(g.logs.String(), `"msg":"upstream target ejected"`) {
		t.Error("the ejection was not logged")
	}
	for _, target := range g.targets() {
		if target != live.URL {
			t.Fatalf("the log names %s for a request the live target answered", target)
		}
	}
}

// blackhole is a loopback address whose listen backlog is full: a dial to
// it is neither accepted nor refused, it times out.
func blackhole(t *testing.T) string {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	// The one connection the backlog holds, never accepted.
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
		c.Close()
		t.Skip("this kernel accepts past a full backlog; no target to time out on")
	}
	return "http://" + addr
}

func TestAConnectTimeoutIsAFailureAndTheGetGoesElsewhere(t *testing.T) {
	live, hole := newUpstream(t), blackhole(t)
	g := newPoolGateway(t, proxy.Pool{Name: "legacy", Targets: []string{live.URL, hole}, ConnectTimeout: 200 * time.Millisecond, MaxFails: 2, FailTimeout: time.Minute})
	for i := range 6 {
		if code, _ := g.send("GET", ""); code != 200 {
			t.Fatalf("request %d: status %d", i, code)
		}
	}
	if n := g.metric("gateway_upstream_failures_total", "target", hole, "cause", "connect_timeout"); n != 2 {
		t.Errorf("%v connect timeouts counted, want max_fails = 2", n)
	}
	if g.metric("gateway_upstream_ejected", "target", hole) != 1 {
		t.Error("the target that never answers the dial is not ejected")
	}
	if live.count() != 6 {
		t.Errorf("the live target saw %d of 6", live.count())
	}
}

// Failures never eject the last target in rotation: with every target
// dead, one stays, and the answer is still a 502 at once.
func TestWithEveryTargetDeadTheAnswerIs502AtOnce(t *testing.T) {
	g := newPoolGateway(t, proxy.Pool{Name: "legacy", Targets: []string{deadURL(t), deadURL(t)}, MaxFails: 1, FailTimeout: time.Minute})
	for i, wantType := range []string{"upstream-failed", "upstream-failed", "upstream-failed"} {
		req, _ := http.NewRequest("GET", g.URL+"/orders", nil)
		start := time.Now()
		res := do(t, req)
		took := time.Since(start)
		var body map[string]any
		json.NewDecoder(res.Body).Decode(&body)
		if res.StatusCode != 502 || body["type"] != "urn:edge-gateway:problem:"+wantType {
			t.Fatalf("request %d: %d %v", i, res.StatusCode, body)
		}
		if took > time.Second {
			t.Fatalf("request %d took %v", i, took)
		}
	}
	if n := g.metric("gateway_upstream_ejected"); n != 1 {
		t.Errorf("%v targets ejected, want 1: never the last", n)
	}
}

func TestResponseTimeoutAnswers504(t *testing.T) {
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	g := newPoolGateway(t, proxy.Pool{Name: "legacy", Targets: []string{slow.URL}, ResponseTimeout: time.Second})
	req, _ := http.NewRequest("GET", g.URL+"/orders", nil)
	start := time.Now()
	res := do(t, req)
	took := time.Since(start)
	var body map[string]any
	json.NewDecoder(res.Body).Decode(&body)
	if res.StatusCode != 504 || body["type"] != "urn:edge-gateway:problem:upstream-timeout" || took >= 2500*time.Millisecond {
		t.Fatalf("%d %v after %v", res.StatusCode, body, took)
	}
	if g.metric("gateway_upstream_failures_total", "cause", "response_timeout") != 1 {
		t.Error("the timeout was not counted")
	}
}

func TestRequestsThatMustNotBeSentTwiceAreNotRetried(t *testing.T) {
	for _, c := range []struct{ method, body string }{{"POST", `{"order":1}`}, {"GET", "a body"}, {"PATCH", ""}} {
		t.Run(c.method+" "+fmt.Sprint(c.body != ""), func(t *testing.T) {
			live := newUpstream(t)
			g := newPoolGateway(t, proxy.Pool{Name: "legacy", Targets: []string{live.URL, deadURL(t)}, MaxFails: 100})
			codes := map[int]int{}
			for range 4 {
				code, _ := g.send(c.method, c.body)
				codes[code]++
			}
			if codes[502] != 2 || codes[200] != 2 || live.count() != 2 {
				t.Fatalf("statuses %v, live target saw %d; want two 502s and two requests upstream", codes, live.count())
			}
			if g.metric("gateway_upstream_retries_total") != 0 {
				t.Fatal("a retry was counted")
			}
		})
	}
}

func TestLeastRequestsAvoidsABusyTarget(t *testing.T) {
	release := make(chan struct{})
	var busy atomic.Int64
	hold := func(name string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("hold") != "" {
				busy.Add(1)
				<-release
			}
			w.Header().Set("X-Target", name)
		}))
		t.Cleanup(s.Close)
		return s
	}
	a, b := hold("a"), hold("b")
	g := newPoolGateway(t, proxy.Pool{Name: "legacy", Targets: []string{a.URL, b.URL}, Balance: proxy.LeastRequests})
	held := make(chan string, 1)
	go func() {
		res, err := http.Get(g.URL + "/orders?hold=1")
		if err != nil {
			held <- err.Error()
			return
		}
		res.Body.Close()
		held <- res.Header.Get("X-Target")
	}()
	eventually(t, "the held request reached a target", func() bool { return busy.Load() == 1 })
	seen := map[string]int{}
	for range 10 {
		res, err := http.Get(g.URL + "/orders")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		seen[res.Header.Get("X-Target")]++
	}
	close(release)
	busyOne := <-held
	if len(seen) != 1 || seen[busyOne] != 0 {
		t.Fatalf("with %s busy, requests went to %v", busyOne, seen)
	}
}

// toggled is an upstream whose health path answers 200 or 503 at will,
// and that counts the checks it answers.
type toggled struct {
	*upstream
	healthy atomic.Bool
	checks  atomic.Int64
}

func newToggled(t *testing.T) *toggled {
	u := &toggled{upstream: &upstream{}}
	u.healthy.Store(true)
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			u.checks.Add(1)
			if !u.healthy.Load() {
				w.WriteHeader(503)
			}
			return
		}
		u.mu.Lock()
		u.requests = append(u.requests, r)
		u.mu.Unlock()
	}))
	t.Cleanup(u.Close)
	return u
}

func TestActiveChecksEjectAndRestoreATarget(t *testing.T) {
	a, b := newToggled(t), newToggled(t)
	g := newPoolGateway(t, proxy.Pool{Name: "legacy", Targets: []string{a.URL, b.URL},
		Health: &proxy.HealthCheck{Path: "/healthz", Interval: 20 * time.Millisecond}})
	ejected := func() bool { return g.metric("gateway_upstream_ejected", "target", b.URL) == 1 }

	b.healthy.Store(false)
	eventually(t, "a failed check ejects b", ejected)
	before := b.count()
	for range 6 {
		if code, _ := g.send("GET", ""); code != 200 {
			t.Fatalf("status %d", code)
		}
	}
	if b.count() != before {
		t.Fatal("requests went to the ejected target")
	}

	b.healthy.Store(true)
	checksAtRecovery := b.checks.Load()
	eventually(t, "passing checks restore b", func() bool { return !ejected() })
	if n := b.checks.Load() - checksAtRecovery; n < 2 {
		t.Errorf("b came back after %d passing checks, want 2", n)
	}
	for range 6 {
		g.send("GET", "")
	}
	if b.count() == before {
		t.Fatal("the restored target gets no requests")
	}

	// Close stops the checks.
	g.handler.Close()
	n := a.checks.Load()
	time.Sleep(100 * time.Millisecond)
	if a.checks.Load() > n+1 {
		t.Fatalf("%d checks after Close", a.checks.Load()-n)
	}
}

func TestAReloadThatKeepsAPoolKeepsItsEjections(t *testing.T) {
	live, dead := newUpstream(t), deadURL(t)
	p := proxy.Pool{Name: "legacy", Targets: []string{live.URL, dead}, MaxFails: 1, FailTimeout: time.Minute}
	g := newPoolGateway(t, p)
	for range 2 {
		g.send("GET", "")
	}
	if g.metric("gateway_upstream_ejected", "target", dead) != 1 {
		t.Fatal("the dead target was not ejected")
	}
	// The reloaded pool has another response timeout: a new transport,
	// the same targets.
	p.ResponseTimeout = 30 * time.Second
	if err := g.handler.Swap(poolConfig(t, p)); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if code, _ := g.send("GET", ""); code != 200 {
			t.Fatalf("status %d", code)
		}
	}
	if n := g.metric("gateway_upstream_failures_total", "target", dead); n != 1 {
		t.Fatalf("%v failures: the reload forgot the ejection", n)
	}
	if g.metric("gateway_upstream_ejected", "target", dead) != 1 {
		t.Fatal("the ejected gauge forgot the ejection")
	}
	// A reload that drops the target drops its series.
	p.Targets = p.Targets[:1]
	if err := g.handler.Swap(poolConfig(t, p)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"gateway_upstream_requests_total", "gateway_upstream_failures_total", "gateway_upstream_retries_total", "gateway_upstream_ejected"} {
		if g.metric(name, "target", dead) != 0 {
			t.Errorf("%s still reports the removed target", name)
		}
	}
	if g.metric("gateway_upstream_requests_total", "target", live.URL) == 0 {
		t.Error("the kept target's series went too")
	}
}

func TestAReloadThatRemovesAPoolDropsItsDurationSeries(t *testing.T) {
	up := newUpstream(t)
	p := proxy.Pool{Name: "legacy", Targets: []string{up.URL}}
	g := newPoolGateway(t, p)
	g.send("GET", "")
	if n := g.metric("gateway_upstream_duration_seconds", "pool", "legacy"); n != 1 {
		t.Fatalf("%v upstream durations observed for legacy, want 1", n)
	}
	p.Name = "modern"
	if err := g.handler.Swap(poolConfig(t, p)); err != nil {
		t.Fatal(err)
	}
	g.send("GET", "")
	if n := g.metric("gateway_upstream_duration_seconds", "pool", "legacy"); n != 0 {
		t.Errorf("the removed pool still reports %v durations", n)
	}
	if n := g.metric("gateway_upstream_duration_seconds", "pool", "modern"); n != 1 {
		t.Errorf("%v upstream durations observed for modern, want 1", n)
	}
}

func TestAReloadDoesNotDropRequestsInFlight(t *testing.T) {
	release := make(chan struct{})
	var started sync.WaitGroup
	started.Add(3)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started.Done()
		<-release
		fmt.Fprint(w, "done")
	}))
	t.Cleanup(slow.Close)
	p := proxy.Pool{Name: "legacy", Targets: []string{slow.URL}}
	g := newPoolGateway(t, p)
	codes := make(chan int, 3)
	for range 3 {
		go func() {
			res, err := http.Get(g.URL + "/orders")
			if err != nil {
				codes <- 0
				return
			}
			res.Body.Close()
			codes <- res.StatusCode
		}()
	}
	started.Wait()
	p.ConnectTimeout = time.Second // a new transport; the old one's idle connections close
	if err := g.handler.Swap(poolConfig(t, p)); err != nil {
		t.Fatal(err)
	}
	close(release)
	for range 3 {
		if c := <-codes; c != 200 {
			t.Fatalf("a request in flight during the reload got %d", c)
		}
	}
}

// BenchmarkBalancedRequestPath is BenchmarkRequestPath's unlimited case
// through a pool of three targets: the balancer's cost, allocations
// included, is the difference.
func BenchmarkBalancedRequestPath(b *testing.B) {
	for _, balance := range []proxy.Balance{proxy.RoundRobin, proxy.LeastRequests} {
		b.Run(balance.String(), func(b *testing.B) {
			m := limiter.NewMemory(limiter.MemoryOptions{})
			defer m.Close()
			var targets []string
			for i := range 3 {
				targets = append(targets, fmt.Sprintf("http://upstream-%d.invalid", i))
			}
			h, err := proxy.NewHandler(proxy.Options{Transport: &countingTransport{}}, proxy.Config{
				Routes:   []proxy.Route{{OperationID: "orders.read", Path: "/orders", Pool: "legacy"}},
				Pools:    []proxy.Pool{{Name: "legacy", Targets: targets, Balance: balance}},
				Resolver: newResolver(b, nil), Limiter: m,
			})
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			req := httptest.NewRequest("GET", "/orders/42", nil)
			req.RemoteAddr = "203.0.113.5:4242"
			h.ServeHTTP(httptest.NewRecorder(), req)
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != 200 {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
	}
}
