package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
)

const fakeSecret = "test-only-fake-hmac-secret-0123456789abcdef"

// upstream records what reached it.
type upstream struct {
	*httptest.Server
	mu       sync.Mutex
	requests []*http.Request
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.requests = append(u.requests, r.Clone(context.Background()))
		u.mu.Unlock()
		w.Header().Set("X-Upstream-Path", r.URL.EscapedPath())
		fmt.Fprintf(w, "hello from %s", r.URL.Path)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.requests)
}

func (u *upstream) last() *http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.requests[len(u.requests)-1]
}

type gateway struct {
	*httptest.Server
	clock   *limitertest.Clock
	handler *proxy.Handler
	logs    *syncBuffer
	lim     proxy.Limiter // what the handler asks
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type setup struct {
	routes      []proxy.Route
	trusted     []string
	limiter     proxy.Limiter
	underscores bool              // AllowUnderscoreHeaders
	metrics     *proxy.Metrics    // nil: none
	resolver    *subject.Resolver // nil: newResolver(t, trusted)
	tunnelIdle  time.Duration
	bodyRead    time.Duration
	// invalidTokens is the budget of invalid tokens per client; nil: the
	// default, 10 a minute.
	invalidTokens *limiter.Policy
	maxDelayed    int // MaxDelayed; 0: the default
	pools         []proxy.Pool
	rlsRules      []proxy.RLSRule
	rlsToken      string
	adminToken    string
}

func newResolver(t testing.TB, trusted []string) *subject.Resolver {
	var prefixes []netip.Prefix
	for _, s := range trusted {
		prefixes = append(prefixes, netip.MustParsePrefix(s))
	}
	r, err := subject.NewResolver(subject.Options{
		TrustedProxies:  prefixes,
		PrincipalHeader: "X-Auth-Principal",
		APIKeyHeader:    "X-API-Key",
		KnownKeys: map[subject.KeyHash]struct{}{
			sha256.Sum256([]byte("known-key-one")):  {},
			sha256.Sum256([]byte("known-key-two")):  {},
			sha256.Sum256([]byte("known-gold-key")): {},
		},
		KeyPlans:         map[subject.KeyHash]string{sha256.Sum256([]byte("known-gold-key")): "gold"},
		PlanHeader:       "X-Auth-Plan",
		Plans:            []string{"gold", "partner"},
		PseudonymKeys:    map[int][]byte{1: []byte(fakeSecret)},
		PseudonymVersion: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func newGateway(t *testing.T, s setup) *gateway {
	t.Helper()
	g := &gateway{clock: limitertest.NewClock(), logs: &syncBuffer{}}
	lim := s.limiter
	if lim == nil {
		m := limiter.NewMemory(limiter.MemoryOptions{Clock: g.clock})
		t.Cleanup(func() { m.Close() })
		lim = m
	}
	g.lim = lim
	resolver := s.resolver
	if resolver == nil {
		resolver = newResolver(t, s.trusted)
	}
	h, err := proxy.NewHandler(proxy.Options{
		Logger:    slog.New(slog.NewJSONHandler(g.logs, nil)),
		AccessLog: true,
		Metrics:   s.metrics,
	}, proxy.Config{Routes: s.routes, Pools: s.pools, Resolver: resolver, Limiter: lim, AllowUnderscoreHeaders: s.underscores,
		TunnelIdleTimeout: s.tunnelIdle, BodyReadTimeout: s.bodyRead, InvalidTokenPolicy: s.invalidTokens, MaxDelayed: s.maxDelayed,
		RLSRules: s.rlsRules, RLSToken: s.rlsToken, AdminToken: s.adminToken})
	if err != nil {
		t.Fatal(err)
	}
	g.handler = h
	g.Server = httptest.NewServer(h)
	t.Cleanup(g.Close)
	return g
}

func route(id, path string, up *upstream, t *testing.T, p *limiter.Policy) proxy.Route {
	return proxy.Route{
		OperationID: id, Path: path, Upstream: up.URL, Policies: onePolicy(p),
		Subject: []subject.Kind{subject.Principal, subject.APIKey, subject.ClientIP}, Cost: 1,
	}
}

// onePolicy is the limit of a route with the one policy p, or none when p
// is nil.
func onePolicy(p *limiter.Policy) []*limiter.Policy {
	if p == nil {
		return nil
	}
	return []*limiter.Policy{p}
}

func policy(p *limiter.Policy, name string) *limiter.Policy {
	p.Name = name
	return p
}

func (g *gateway) get(t *testing.T, path string, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("GET", g.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) *http.Response {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(body))
	return res
}

// raw sends a request target as written, so no client library cleans it.
func (g *gateway) raw(t *testing.T, requestLine string, headers ...string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", g.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var b strings.Builder
	b.WriteString(requestLine + "\r\nHost: gw.test\r\nConnection: close\r\n")
	for i := 0; i+1 < len(headers); i += 2 {
		b.WriteString(headers[i] + ": " + headers[i+1] + "\r\n")
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(c, b.String()); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body = io.NopCloser(bytes.NewReader(body))
	return res
}

func statuses(t *testing.T, g *gateway, path string, n int, headers ...string) []int {
	t.Helper()
	var got []int
	for i := 0; i < n; i++ {
		got = append(got, g.get(t, path, headers...).StatusCode)
	}
	return got
}

func wantStatuses(t *testing.T, got []int, want ...int) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("statuses %v, want %v", got, want)
	}
}

func TestAlgorithmsOverHTTP(t *testing.T) {
	cases := []struct {
		name       string
		policy     *limiter.Policy
		advance    time.Duration
		retryAfter string
		policyHdr  string
	}{
		{"fixed window", limitertest.FixedWindow(2, time.Minute), time.Minute, "60", `"p";q=2;w=60`},
		{"sliding counter", limitertest.SlidingCounter(2, time.Minute), 2 * time.Minute, "61", `"p";q=2;w=60`},
		{"token bucket", limitertest.TokenBucket(2, 1, time.Second), time.Second, "1", `"p";q=2;w=2`},
	}
	for _, c := range cases {
		t.Run(c.name+" allows the quota, denies with Retry-After, then refills", func(t *testing.T) {
			up := newUpstream(t)
			g := newGateway(t, setup{routes: []proxy.Route{route("orders.read", "/orders", up, t, policy(c.policy, "p"))}})
			first := g.get(t, "/orders")
			if first.StatusCode != 200 {
				t.Fatalf("first request: %d", first.StatusCode)
			}
			if got := first.Header.Get("RateLimit-Policy"); got != c.policyHdr {
				t.Fatalf("RateLimit-Policy %q, want %q", got, c.policyHdr)
			}
			if got := first.Header.Get("RateLimit"); !strings.HasPrefix(got, `"p";r=1;t=`) {
				t.Fatalf("RateLimit %q, want r=1", got)
			}
			if s := g.get(t, "/orders").StatusCode; s != 200 {
				t.Fatalf("second request: %d", s)
			}
			denied := g.get(t, "/orders")
			if denied.StatusCode != 429 {
				t.Fatalf("third request: %d, want 429", denied.StatusCode)
			}
			if got := denied.Header.Get("Retry-After"); got != c.retryAfter {
				t.Fatalf("Retry-After %q, want %q", got, c.retryAfter)
			}
			if got := denied.Header.Get("RateLimit"); !strings.HasPrefix(got, `"p";r=0;t=`) {
				t.Fatalf("RateLimit on 429 %q", got)
			}
			if got := denied.Header.Get("Content-Type"); got != "application/problem+json" {
				t.Fatalf("Content-Type %q", got)
			}
			var body map[string]any
			json.NewDecoder(denied.Body).Decode(&body)
			if body["type"] != "https://iana.org/assignments/http-problem-types#quota-exceeded" || fmt.Sprint(body["violated-policies"]) != "[p]" {
				t.Fatalf("problem body %v", body)
			}
			if up.count() != 2 {
				t.Fatalf("upstream saw %d requests, want 2", up.count())
			}
			g.clock.Advance(c.advance)
			if s := g.get(t, "/orders").StatusCode; s != 200 {
				t.Fatalf("after refill: %d", s)
			}
		})
	}
}

func TestHeaderValuesFollowTheClock(t *testing.T) {
	up := newUpstream(t)
	g := newGateway(t, setup{routes: []proxy.Route{route("r", "/", up, t, policy(limitertest.FixedWindow(1, time.Minute), "per-client"))}})
	res := g.get(t, "/")
	if got := res.Header.Get("RateLimit"); got != `"per-client";r=0;t=60` {
		t.Fatalf("RateLimit %q", got)
	}
	g.clock.Advance(17*time.Second + 500*time.Millisecond)
	res = g.get(t, "/")
	// 42.5s are left; both values round up.
	if res.Header.Get("Retry-After") != "43" || res.Header.Get("RateLimit") != `"per-client";r=0;t=43` {
		t.Fatalf("Retry-After %q RateLimit %q", res.Header.Get("Retry-After"), res.Header.Get("RateLimit"))
	}
	g.clock.Advance(42*time.Second + 499*time.Millisecond)
	res = g.get(t, "/")
	if res.Header.Get("Retry-After") != "1" {
		t.Fatalf("1ms before the reset Retry-After is %q, want 1", res.Header.Get("Retry-After"))
	}
}

func TestRouting(t *testing.T) {
	up := newUpstream(t)
	api := route("api", "/api", up, t, policy(limitertest.FixedWindow(1, time.Minute), "api"))
	orders := route("orders", "/api/orders", up, t, policy(limitertest.FixedWindow(1, time.Minute), "orders"))
	hosted := route("hosted", "/api", up, t, policy(limitertest.FixedWindow(1, time.Minute), "hosted"))
	hosted.Host = "api.example.com"
	reads := route("reads", "/reads", up, t, nil)
	reads.Methods = []string{"GET", "HEAD"}
	g := newGateway(t, setup{routes: []proxy.Route{api, orders, hosted, reads}})

	t.Run("no route is a 404 problem", func(t *testing.T) {
		res := g.get(t, "/nothing")
		var body map[string]any
		json.NewDecoder(res.Body).Decode(&body)
		if res.StatusCode != 404 || body["type"] != "urn:edge-gateway:problem:no-route" {
			t.Fatalf("%d %v", res.StatusCode, body)
		}
	})
	t.Run("the longest prefix wins and operations do not share budgets", func(t *testing.T) {
		if res := g.get(t, "/api/orders/7"); res.StatusCode != 200 || res.Header.Get("RateLimit-Policy") != `"orders";q=1;w=60` {
			t.Fatalf("%d %q", res.StatusCode, res.Header.Get("RateLimit-Policy"))
		}
		if res := g.get(t, "/api/ordersx"); res.StatusCode != 200 || res.Header.Get("RateLimit-Policy") != `"api";q=1;w=60` {
			t.Fatalf("/api/ordersx is not on whole segments of /api/orders: %d %q", res.StatusCode, res.Header.Get("RateLimit-Policy"))
		}
		wantStatuses(t, statuses(t, g, "/api/orders", 1), 429)
		wantStatuses(t, statuses(t, g, "/api/x", 1), 429)
	})
	t.Run("a route with a host beats one without", func(t *testing.T) {
		req, _ := http.NewRequest("GET", g.URL+"/api", nil)
		req.Host = "API.Example.com:8080"
		if res := do(t, req); res.StatusCode != 200 || res.Header.Get("RateLimit-Policy") != `"hosted";q=1;w=60` {
			t.Fatalf("%d %q", res.StatusCode, res.Header.Get("RateLimit-Policy"))
		}
	})
	t.Run("methods outside the route get 405 with Allow", func(t *testing.T) {
		if s := g.get(t, "/reads").StatusCode; s != 200 {
			t.Fatalf("GET: %d", s)
		}
		req, _ := http.NewRequest("DELETE", g.URL+"/reads", nil)
		res := do(t, req)
		if res.StatusCode != 405 || strings.Join(res.Header.Values("Allow"), ",") != "GET,HEAD" {
			t.Fatalf("DELETE: %d Allow=%v", res.StatusCode, res.Header.Values("Allow"))
		}
	})
}

func TestForgedIdentitiesEarnNoBucket(t *testing.T) {
	up := newUpstream(t)
	one := func() *limiter.Policy { return policy(limitertest.FixedWindow(1, time.Minute), "one") }

	t.Run("forwarded and principal headers from an untrusted peer", func(t *testing.T) {
		g := newGateway(t, setup{routes: []proxy.Route{route("r", "/", up, t, one())}, trusted: []string{"10.0.0.0/8"}})
		wantStatuses(t, statuses(t, g, "/", 1, "X-Forwarded-For", "198.51.100.1"), 200)
		wantStatuses(t, statuses(t, g, "/", 1, "X-Forwarded-For", "198.51.100.2"), 429)
		wantStatuses(t, statuses(t, g, "/", 1, "X-Auth-Principal", "admin"), 429)
		wantStatuses(t, statuses(t, g, "/", 1, "X-Real-IP", "198.51.100.3"), 429)
	})
	t.Run("a forged left-most hop behind a trusted proxy", func(t *testing.T) {
		g := newGateway(t, setup{routes: []proxy.Route{route("r", "/", up, t, one())}, trusted: []string{"127.0.0.1/32"}})
		wantStatuses(t, statuses(t, g, "/", 1, "X-Forwarded-For", "198.51.100.1, 203.0.113.9"), 200)
		wantStatuses(t, statuses(t, g, "/", 1, "X-Forwarded-For", "198.51.100.2, 203.0.113.9"), 429)
		wantStatuses(t, statuses(t, g, "/", 1, "X-Forwarded-For", "198.51.100.2", "X-Forwarded-For", "203.0.113.9"), 429)
		// A different real client behind the same proxy has its own budget,
		// and so does a principal the proxy asserts.
		wantStatuses(t, statuses(t, g, "/", 2, "X-Forwarded-For", "203.0.113.10"), 200, 429)
		wantStatuses(t, statuses(t, g, "/", 2, "X-Auth-Principal", "alice"), 200, 429)
	})
	t.Run("random api keys share the address's bucket, known keys get one each", func(t *testing.T) {
		g := newGateway(t, setup{routes: []proxy.Route{route("r", "/", up, t, one())}})
		wantStatuses(t, statuses(t, g, "/", 1, "X-API-Key", "random-1"), 200)
		for i := 2; i < 6; i++ {
			wantStatuses(t, statuses(t, g, "/", 1, "X-API-Key", fmt.Sprint("random-", i)), 429)
		}
		wantStatuses(t, statuses(t, g, "/", 2, "X-API-Key", "known-key-one"), 200, 429)
		wantStatuses(t, statuses(t, g, "/", 2, "X-API-Key", "known-key-two"), 200, 429)
	})
	t.Run("duplicate credential headers are refused", func(t *testing.T) {
		g := newGateway(t, setup{routes: []proxy.Route{route("r", "/", up, t, one())}})
		before := up.count()
		wantStatuses(t, statuses(t, g, "/", 1, "X-API-Key", "known-key-one", "X-API-Key", "known-key-two"), 400)
		if up.count() != before {
			t.Fatal("a refused request reached the upstream")
		}
	})
}

func TestPathSpellingsCannotDodgeTheirRoute(t *testing.T) {
	up := newUpstream(t)
	limited := route("limited", "/a", up, t, policy(limitertest.FixedWindow(1, time.Minute), "a"))
	open := route("open", "/", up, t, nil)
	g := newGateway(t, setup{routes: []proxy.Route{limited, open}})
	if res := g.raw(t, "GET /a HTTP/1.1"); res.StatusCode != 200 {
		t.Fatalf("first: %d", res.StatusCode)
	}
	for _, spelling := range []string{
		"/a", "//a", "/./a", "/x/../a", "/%61", "/a/", "/a//", "/%2e/a", "/%2E%2E/a", "/x/%2e%2e/a",
		"/a;jsessionid=1", "/a/b/..", "///a/./", "/x/y/../../a",
	} {
		res := g.raw(t, "GET "+spelling+" HTTP/1.1")
		if res.StatusCode != 429 {
			t.Errorf("%s: %d, want 429 (counted against /a)", spelling, res.StatusCode)
		}
	}
	for _, spelling := range []string{"/%2Fa", "/%2fa", "/x%2F..%2Fa", "/%5Ca", "/x/..;/a", "/x/.;/a", "/%zz", "/%0a", "/%00a"} {
		res := g.raw(t, "GET "+spelling+" HTTP/1.1")
		if res.StatusCode != 400 {
			t.Errorf("%s: %d, want 400", spelling, res.StatusCode)
		}
	}
	t.Run("the path forwarded is the normalized one", func(t *testing.T) {
		res := g.raw(t, "GET /x/../b/%7euser/./c%3f HTTP/1.1")
		if got := res.Header.Get("X-Upstream-Path"); got != "/b/~user/c%3F" {
			t.Fatalf("upstream saw %q", got)
		}
	})
}

func TestAbsoluteFormTargetGoesToTheConfiguredUpstream(t *testing.T) {
	up := newUpstream(t)
	g := newGateway(t, setup{routes: []proxy.Route{route("r", "/a", up, t, policy(limitertest.FixedWindow(1, time.Minute), "a"))}})
	res := g.raw(t, "GET http://evil.example/a HTTP/1.1")
	if res.StatusCode != 200 || up.count() != 1 {
		t.Fatalf("%d, upstream saw %d", res.StatusCode, up.count())
	}
	if got := up.last().Host; got != up.Listener.Addr().String() {
		t.Fatalf("upstream Host %q", got)
	}
	if res := g.raw(t, "GET http://other.example/a HTTP/1.1"); res.StatusCode != 429 {
		t.Fatalf("a second absolute-form host earned a fresh budget: %d", res.StatusCode)
	}
}

func TestForwardingHeaders(t *testing.T) {
	up := newUpstream(t)
	t.Run("from an untrusted peer the gateway writes them itself", func(t *testing.T) {
		g := newGateway(t, setup{routes: []proxy.Route{route("r", "/", up, t, nil)}, trusted: []string{"10.0.0.0/8"}})
		g.get(t, "/", "X-Forwarded-For", "198.51.100.1", "X-Real-IP", "198.51.100.1", "True-Client-IP", "198.51.100.1",
			"CF-Connecting-IP", "198.51.100.1", "X-Auth-Principal", "admin", "Forwarded", "for=198.51.100.1", "X-Forwarded-Host", "evil")
		h := up.last().Header
		if got := strings.Join(h.Values("X-Forwarded-For"), ","); got != "127.0.0.1" {
			t.Fatalf("X-Forwarded-For %q", got)
		}
		for _, name := range []string{"X-Real-Ip", "True-Client-Ip", "Cf-Connecting-Ip", "X-Auth-Principal", "Forwarded"} {
			if v := h.Values(name); len(v) > 0 {
				t.Errorf("%s reached the upstream: %v", name, v)
			}
		}
		if got := h.Get("X-Forwarded-Host"); got != g.Listener.Addr().String() {
			t.Errorf("X-Forwarded-Host %q", got)
		}
		if got := h.Get("X-Forwarded-Proto"); got != "http" {
			t.Errorf("X-Forwarded-Proto %q", got)
		}
	})
	t.Run("from a trusted proxy the chain is kept and extended", func(t *testing.T) {
		g := newGateway(t, setup{routes: []proxy.Route{route("r", "/", up, t, nil)}, trusted: []string{"127.0.0.1/32"}})
		g.get(t, "/", "X-Forwarded-For", "203.0.113.9", "X-Forwarded-For", "10.9.9.9", "X-Auth-Principal", "alice", "X-Forwarded-Proto", "https")
		h := up.last().Header
		if got := strings.Join(h.Values("X-Forwarded-For"), ","); got != "203.0.113.9, 10.9.9.9, 127.0.0.1" {
			t.Fatalf("X-Forwarded-For %q", got)
		}
		if h.Get("X-Auth-Principal") != "alice" || h.Get("X-Forwarded-Proto") != "https" {
			t.Fatalf("principal %q proto %q", h.Get("X-Auth-Principal"), h.Get("X-Forwarded-Proto"))
		}
	})
	t.Run("hop-by-hop headers are stripped", func(t *testing.T) {
		g := newGateway(t, setup{routes: []proxy.Route{route("r", "/", up, t, nil)}})
		g.get(t, "/", "Connection", "X-Secret", "X-Secret", "1", "Proxy-Authorization", "Basic x")
		h := up.last().Header
		if h.Get("X-Secret") != "" || h.Get("Proxy-Authorization") != "" {
			t.Fatalf("hop-by-hop headers forwarded: %v", h)
		}
	})
}

// stubLimiter answers every request with one outcome. It stands in for a
// backend that cannot decide; the real backends cannot be made to fail on
// demand in-process.
type stubLimiter struct{ outcome limiter.Outcome }

func (s stubLimiter) Evaluate(context.Context, limiter.Request) limiter.Outcome { return s.outcome }
func (s stubLimiter) StandingDenial(limiter.Request) (limiter.Evaluated, bool) {
	return limiter.Evaluated{}, false
}

func TestOutcomesThatAreNotDecisionsFailClosed(t *testing.T) {
	for _, o := range []limiter.Outcome{
		limiter.Unavailable{Category: limiter.UnavailableBeforeSend},
		limiter.Unavailable{Category: limiter.ClockUnsafe},
		limiter.Unavailable{Category: limiter.AdmissionRejected},
		limiter.Indeterminate{},
		limiter.Incompatible{Reason: limiter.UnknownPolicy},
	} {
		t.Run(fmt.Sprintf("%T %v", o, o), func(t *testing.T) {
			up := newUpstream(t)
			g := newGateway(t, setup{routes: []proxy.Route{route("r", "/", up, t, policy(limitertest.FixedWindow(1, time.Minute), "p"))}, limiter: stubLimiter{o}})
			res := g.get(t, "/")
			var body map[string]any
			json.NewDecoder(res.Body).Decode(&body)
			if res.StatusCode != 503 || res.Header.Get("Retry-After") != "1" || body["type"] != "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity" {
				t.Fatalf("%d Retry-After=%q %v", res.StatusCode, res.Header.Get("Retry-After"), body)
			}
			if up.count() != 0 {
				t.Fatal("the upstream was reached")
			}
		})
	}
}

func TestUpstreamFailures(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	g := newGateway(t, setup{routes: []proxy.Route{{OperationID: "dead", Path: "/", Upstream: dead.URL}}})
	res := g.get(t, "/")
	var body map[string]any
	json.NewDecoder(res.Body).Decode(&body)
	if res.StatusCode != 502 || body["type"] != "urn:edge-gateway:problem:upstream-failed" {
		t.Fatalf("%d %v", res.StatusCode, body)
	}
}

// echoUpgrade answers an upgrade to the echo protocol: 101, then each
// line the client sends back, after "echo: ", until it hangs up.
func echoUpgrade(w http.ResponseWriter) {
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
	brw.Flush()
	for {
		line, err := brw.ReadString('\n')
		if err != nil {
			return
		}
		brw.WriteString("echo: " + line)
		brw.Flush()
	}
}

// openEcho opens a connection through g upgraded to the echo protocol
// (GET /ws), with a deadline within from now, and checks that a line sent
// comes back echoed. The caller closes it.
func openEcho(t *testing.T, g *gateway, within time.Duration) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", g.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(within))
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: gw\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != 101 {
		c.Close()
		t.Fatalf("%v %v", res, err)
	}
	io.WriteString(c, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "echo: ping\n" {
		c.Close()
		t.Fatalf("%q %v", line, err)
	}
	return c
}

func TestStreamingAndUpgrades(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "echo" {
			echoUpgrade(w)
			return
		}
		w.Write([]byte("first\n"))
		http.NewResponseController(w).Flush()
		<-release
		w.Write([]byte("second\n"))
	}))
	t.Cleanup(up.Close)
	defer close(release)
	g := newGateway(t, setup{routes: []proxy.Route{{OperationID: "s", Path: "/", Upstream: up.URL, Policies: onePolicy(policy(limitertest.FixedWindow(100, time.Minute), "p")), Subject: []subject.Kind{subject.ClientIP}, Cost: 1, Upgrades: []string{"echo"}}}})

	t.Run("a streamed response arrives before the upstream finishes", func(t *testing.T) {
		res, err := http.Get(g.URL + "/stream")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		line, err := bufio.NewReader(res.Body).ReadString('\n')
		if err != nil || line != "first\n" {
			t.Fatalf("%q %v", line, err)
		}
	})
	t.Run("an upgraded connection passes through", func(t *testing.T) {
		openEcho(t, g, 5*time.Second).Close()
	})
}

func TestAccessLogHoldsNoRawIdentity(t *testing.T) {
	up := newUpstream(t)
	g := newGateway(t, setup{routes: []proxy.Route{route("orders.read", "/", up, t, policy(limitertest.FixedWindow(100, time.Minute), "p"))}, trusted: []string{"127.0.0.1/32"}})
	g.get(t, "/")
	g.get(t, "/", "X-API-Key", "known-key-one")
	g.get(t, "/", "X-Auth-Principal", "alice@example.com")
	g.get(t, "/", "X-Forwarded-For", "203.0.113.77")
	// The target the log names is configuration, on loopback here like
	// the client: take it out before looking for the client's address.
	logs := g.logs.String()
	scrubbed := strings.ReplaceAll(logs, `"target":"`+up.URL+`"`, "")
	for _, raw := range []string{"127.0.0.1", "known-key-one", "alice@example.com", "203.0.113.77"} {
		if strings.Contains(scrubbed, raw) {
			t.Errorf("log holds %q", raw)
		}
	}
	var n int
	for line := range strings.SplitSeq(strings.TrimSpace(logs), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		if rec["msg"] != "request" {
			continue
		}
		n++
		if rec["route"] != "orders.read" || !strings.HasPrefix(fmt.Sprint(rec["pseudonym"]), "v1:") || rec["status"] != float64(200) || rec["outcome"] != "allowed" || rec["target"] != up.URL {
			t.Errorf("record %v", rec)
		}
		// The upstream answers "hello from /".
		if rec["bytes"] != float64(len("hello from /")) {
			t.Errorf("bytes %v, want %d", rec["bytes"], len("hello from /"))
		}
	}
	if n != 4 {
		t.Fatalf("%d access records, want 4", n)
	}
}

func TestARefusedSwapKeepsTheCurrentConfiguration(t *testing.T) {
	up := newUpstream(t)
	p := policy(limitertest.FixedWindow(1, time.Minute), "p")
	g := newGateway(t, setup{routes: []proxy.Route{route("r", "/", up, t, p)}})
	wantStatuses(t, statuses(t, g, "/", 2), 200, 429)
	m := limiter.NewMemory(limiter.MemoryOptions{})
	t.Cleanup(func() { m.Close() })
	if err := g.handler.Swap(proxy.Config{Routes: []proxy.Route{route("r", "/", up, t, p), route("r", "/x", up, t, p)}, Resolver: newResolver(t, nil), Limiter: m}); err == nil {
		t.Fatal("a config with a duplicate route was swapped in")
	}
	wantStatuses(t, statuses(t, g, "/", 1), 429)
}

// countingTransport answers every request itself, so the benchmark measures
// the gateway and not a loopback upstream. Its response has a Date header,
// as every real one does: an empty header map would charge the first
// header a route's rule adds with the map's first allocation.
type countingTransport struct{ n atomic.Int64 }

var benchDate = []string{"Thu, 03 Dec 2026 09:00:00 GMT"}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return &http.Response{StatusCode: 200, Header: http.Header{"Date": benchDate}, Body: http.NoBody, Request: r, ContentLength: 0}, nil
}

func BenchmarkRequestPath(b *testing.B) {
	// A legacy route: a rewritten prefix, its own Host, and four header
	// rules, two each way.
	legacy := func(r *proxy.Route) {
		r.Rewrite, r.RewritePrefix = true, "/cgi-bin/orders"
		r.HostHeader = "orders.internal"
		r.RequestHeaders = proxy.HeaderRules{Set: []proxy.Header{{Name: "X-Gateway", Value: "edge"}}, Remove: []string{"X-Debug"}}
		r.ResponseHeaders = proxy.HeaderRules{Set: []proxy.Header{{Name: "Cache-Control", Value: "no-store"}}, Remove: []string{"Server"}}
	}
	for _, bc := range []struct {
		name   string
		policy *limiter.Policy
		status int
		route  func(*proxy.Route)
		// metrics: the handler and the limiter count in a registry of
		// their own, as the gateway's always do.
		metrics bool
	}{
		{"allowed", limitertest.FixedWindow(1<<40, time.Hour), 200, nil, false},
		{"allowed_with_metrics", limitertest.FixedWindow(1<<40, time.Hour), 200, nil, true},
		{"denied", limitertest.FixedWindow(1, time.Hour), 429, nil, false},
		{"denied_with_metrics", limitertest.FixedWindow(1, time.Hour), 429, nil, true},
		{"unlimited", nil, 200, nil, false},
		{"allowed_rewritten_with_header_rules", limitertest.FixedWindow(1<<40, time.Hour), 200, legacy, false},
		{"allowed_by_two_policies", limitertest.FixedWindow(1<<40, time.Hour), 200, func(r *proxy.Route) {
			day := limitertest.TokenBucket(1<<40, 1<<40, 24*time.Hour)
			day.Dedup = limiter.Dedup{}
			r.Policies = append(r.Policies, day)
		}, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var reg prometheus.Registerer // nil: none
			if bc.metrics {
				reg = prometheus.NewRegistry()
			}
			m, err := limiter.Open(context.Background(), limiter.Options{Kind: limiter.KindMemory, Registerer: reg})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			if bc.policy != nil {
				bc.policy.Dedup = limiter.Dedup{}
			}
			rt := proxy.Route{OperationID: "orders.read", Path: "/orders", Upstream: "http://upstream.invalid", Policies: onePolicy(bc.policy), Subject: []subject.Kind{subject.ClientIP}, Cost: 1}
			if bc.route != nil {
				bc.route(&rt)
			}
			opts := proxy.Options{Transport: &countingTransport{}}
			if reg != nil {
				opts.Metrics = proxy.NewMetrics(reg)
			}
			h, err := proxy.NewHandler(opts, proxy.Config{
				Routes: []proxy.Route{rt}, Resolver: newResolver(b, nil), Limiter: m,
			})
			if err != nil {
				b.Fatal(err)
			}
			benchServe(b, h, 1, bc.status)
		})
	}
}

// BenchmarkRequestPathSubjects is the load harness's many-subjects run
// (go run ./bench -subjects 100000) on the request path: a gateway that
// trusts its peer as a proxy, one fixed-window policy with de-duplication
// on, the access log written (to nowhere), and requests from the peer
// itself (the hot key), naming one client in X-Forwarded-For, or naming
// the next of 100,000 clients each (every request a subject last seen
// 100,000 requests before; the table is warmed with one pass). The
// limiter's clock moves as at the harness's 13,000 requests a second, so
// that the hot key remembers as many evaluations, and a rotated subject's
// last one has expired, as there. cpu-ns/op is the process's CPU time.
func BenchmarkRequestPathSubjects(b *testing.B) {
	const rotation = 100_000
	for _, bc := range []struct {
		name    string
		clients int // 0: no X-Forwarded-For
	}{
		{"hot", 0},
		{"forwarded_one", 1},
		{"rotation_100k", rotation},
	} {
		b.Run(bc.name, func(b *testing.B) {
			clock := limitertest.NewClock()
			m := limiter.NewMemory(limiter.MemoryOptions{Clock: clock})
			defer m.Close()
			rt := proxy.Route{OperationID: "orders.read", Path: "/orders", Upstream: "http://upstream.invalid",
				Policies: onePolicy(limitertest.FixedWindow(1<<40, 24*time.Hour)), Subject: []subject.Kind{subject.ClientIP}, Cost: 1}
			logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
			h, err := proxy.NewHandler(proxy.Options{Transport: &countingTransport{}, Logger: logger, AccessLog: true}, proxy.Config{
				Routes: []proxy.Route{rt}, Resolver: newResolver(b, []string{"127.0.0.1/32"}), Limiter: m,
			})
			if err != nil {
				b.Fatal(err)
			}
			forwarded := make([][]string, bc.clients)
			for i := range forwarded {
				forwarded[i] = []string{fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)}
			}
			req := httptest.NewRequest("GET", "/orders/42", nil)
			req.RemoteAddr = "127.0.0.1:4242"
			i := 0
			serve := func() int {
				req.URL.Path, req.URL.RawPath = "/orders/42", ""
				clock.Advance(time.Second / 13_000)
				if len(forwarded) > 0 {
					req.Header["X-Forwarded-For"] = forwarded[i%len(forwarded)]
					i++
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				return w.Code
			}
			for range max(len(forwarded), 1) {
				serve()
			}
			b.ReportAllocs()
			cpu0 := proxy.ProcessCPU()
			for b.Loop() {
				if code := serve(); code != 200 {
					b.Fatalf("status %d, want 200", code)
				}
			}
			b.ReportMetric(float64(proxy.ProcessCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// benchServe times h serving GET /orders/42 from one client address,
// after warm requests that do not count, each answered status; headers
// are name, value pairs. cpu-ns/op is the process's CPU time.
func benchServe(b *testing.B, h http.Handler, warm int, status int, headers ...string) {
	req := httptest.NewRequest("GET", "/orders/42", nil)
	req.RemoteAddr = "203.0.113.5:4242"
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	serve := func() int {
		// The handler writes the forwarded path into the request.
		req.URL.Path, req.URL.RawPath = "/orders/42", ""
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	for range warm {
		serve()
	}
	b.ReportAllocs()
	cpu0 := proxy.ProcessCPU()
	for b.Loop() {
		if code := serve(); code != status {
			b.Fatalf("status %d, want %d", code, status)
		}
	}
	b.ReportMetric(float64(proxy.ProcessCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

func TestMalformedFramingIsRefusedBeforeTheUpstream(t *testing.T) {
	up := newUpstream(t)
	g := newGateway(t, setup{routes: []proxy.Route{route("r", "/", up, t, policy(limitertest.FixedWindow(100, time.Minute), "p"))}})
	for name, c := range map[string]struct {
		headers []string // name, value, name, value...
		status  int
	}{
		"two different Content-Length values":  {[]string{"Content-Length", "4", "Content-Length", "5"}, 400},
		"a signed Content-Length":              {[]string{"Content-Length", "+4"}, 400},
		"a transfer coding other than chunked": {[]string{"Transfer-Encoding", "gzip, chunked"}, 501},
		"a repeated chunked coding":            {[]string{"Transfer-Encoding", "chunked", "Transfer-Encoding", "chunked"}, 501},
	} {
		if res := g.raw(t, "POST / HTTP/1.1", c.headers...); res.StatusCode != c.status {
			t.Errorf("%s: %d, want %d", name, res.StatusCode, c.status)
		}
	}
	if up.count() != 0 {
		t.Fatalf("the upstream saw %d malformed requests", up.count())
	}
}
