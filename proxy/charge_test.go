package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
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

// answering is an upstream that answers with h and counts what reached it.
func answering(t *testing.T, h http.HandlerFunc) (*upstream, *atomic.Int64) {
	var n atomic.Int64
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h(w, r)
	}))
	t.Cleanup(u.Close)
	return u, &n
}

// remaining is r of the policy named in the RateLimit header.
func remaining(t *testing.T, res *http.Response, name string) int64 {
	t.Helper()
	for _, m := range strings.Split(res.Header.Get("RateLimit"), ",") {
		m = strings.TrimSpace(m)
		if rest, ok := strings.CutPrefix(m, `"`+name+`";r=`); ok {
			n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ';')], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("RateLimit %q names no %s", res.Header.Get("RateLimit"), name)
	return 0
}

// A login form limited by its failures: 200s are free, and once five 401s
// are spent the next request is refused before the upstream.
func TestFailedLoginsAreCountedByTheirStatus(t *testing.T) {
	onEachBackend(t, failedLoginsAreCountedByTheirStatus)
}

func failedLoginsAreCountedByTheirStatus(t *testing.T, lim proxy.Limiter) {
	up, reached := answering(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Password") != "right" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	})
	p := redisPolicy(limitertest.FixedWindow(5, 15*time.Minute), "failed-logins")
	p.CountStatuses = limiter.StatusSet(401, 403)
	g := newGateway(t, setup{routes: []proxy.Route{route("login", "/login", up, t, p)}, limiter: lim})

	wantStatuses(t, statuses(t, g, "/login", 3, "X-Password", "right"), 200, 200, 200)
	for i := range 5 {
		res := g.get(t, "/login", "X-Password", "wrong")
		if res.StatusCode != 401 {
			t.Fatalf("failure %d: status %d, want 401", i+1, res.StatusCode)
		}
		// What the check saw left, before this failure was charged.
		if r := remaining(t, res, "failed-logins"); r != int64(5-i) {
			t.Fatalf("failure %d: r=%d, want %d", i+1, r, 5-i)
		}
	}
	res := g.get(t, "/login", "X-Password", "right")
	if res.StatusCode != 429 {
		t.Fatalf("after five failures: status %d, want 429", res.StatusCode)
	}
	if v := violated(t, res); len(v) != 1 || v[0] != "failed-logins" {
		t.Fatalf("violated-policies %q", v)
	}
	if n := reached.Load(); n != 8 {
		t.Fatalf("upstream saw %d, want 8", n)
	}
}

// The upstream says what a call cost: 40 a call on a 100-token bucket
// shows 100, 60 and 20 left (what each call found before its charge), and
// the third takes it to -20, a debt the next call is refused by.
func TestACostHeaderChargesItsValueAndIsRemoved(t *testing.T) {
	onEachBackend(t, aCostHeaderChargesItsValueAndIsRemoved)
}

func aCostHeaderChargesItsValueAndIsRemoved(t *testing.T, lim proxy.Limiter) {
	up, reached := answering(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Usage-Cost", "40")
		w.Write([]byte("done"))
	})
	p := redisPolicy(limitertest.TokenBucket(100, 1, time.Hour), "usage")
	p.CostHeader = "x-usage-cost"
	g := newGateway(t, setup{routes: []proxy.Route{route("api", "/api", up, t, p)}, limiter: lim})
	for i, want := range []int64{100, 60, 20} {
		res := g.get(t, "/api")
		if res.StatusCode != 200 || remaining(t, res, "usage") != want {
			t.Fatalf("call %d: status %d, r=%d; want 200, r=%d", i+1, res.StatusCode, remaining(t, res, "usage"), want)
		}
		if v, ok := res.Header["X-Usage-Cost"]; ok {
			t.Fatalf("call %d: the client saw the cost header %q", i+1, v)
		}
	}
	res := g.get(t, "/api")
	if res.StatusCode != 429 || remaining(t, res, "usage") != 0 {
		t.Fatalf("in debt: status %d, r=%d; want 429, r=0", res.StatusCode, remaining(t, res, "usage"))
	}
	if n := reached.Load(); n != 3 {
		t.Fatalf("upstream saw %d, want 3", n)
	}
}

// A streamed response's cost comes in a trailer: charged at the end of the
// body, and the client gets neither the trailer nor its announcement,
// whether the upstream announced it or not.
func TestACostTrailerIsChargedAtTheEndOfAStreamedBody(t *testing.T) {
	for _, announced := range []bool{true, false} {
		t.Run(map[bool]string{true: "announced", false: "unannounced"}[announced], func(t *testing.T) {
			onEachBackend(t, aCostTrailerIsChargedAtTheEndOfAStreamedBody(announced))
		})
	}
}

func aCostTrailerIsChargedAtTheEndOfAStreamedBody(announced bool) func(t *testing.T, lim proxy.Limiter) {
	return func(t *testing.T, lim proxy.Limiter) {
		up, reached := answering(t, func(w http.ResponseWriter, r *http.Request) {
			name := http.TrailerPrefix + "X-Usage-Cost"
			if announced {
				w.Header().Set("Trailer", "X-Usage-Cost, X-Other")
				name = "X-Usage-Cost"
			}
			for range 3 {
				io.WriteString(w, "chunk ")
				w.(http.Flusher).Flush()
			}
			w.Header().Set(name, "30")
			w.Header().Set("X-Other", "kept")
		})
		p := redisPolicy(limitertest.TokenBucket(100, 1, time.Hour), "usage")
		p.CostHeader, p.MaxCost = "X-Usage-Cost", 100
		g := newGateway(t, setup{routes: []proxy.Route{route("stream", "/stream", up, t, p)}, limiter: lim})
		for i, want := range []int64{100, 70, 40, 10} {
			res := g.get(t, "/stream")
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != 200 || string(body) != "chunk chunk chunk " || remaining(t, res, "usage") != want {
				t.Fatalf("call %d: status %d, body %q, r=%d; want 200, the whole body, r=%d", i+1, res.StatusCode, body, remaining(t, res, "usage"), want)
			}
			if len(res.TransferEncoding) == 0 || res.TransferEncoding[0] != "chunked" {
				t.Fatalf("call %d: transfer encoding %q, want chunked", i+1, res.TransferEncoding)
			}
			if v, ok := res.Trailer["X-Usage-Cost"]; ok {
				t.Fatalf("call %d: the client saw the cost trailer %q", i+1, v)
			}
			if strings.Contains(strings.ToLower(res.Header.Get("Trailer")), "x-usage-cost") {
				t.Fatalf("call %d: the client was told of the cost trailer: %q", i+1, res.Header.Get("Trailer"))
			}
			if announced && res.Trailer.Get("X-Other") != "kept" {
				t.Fatalf("call %d: another trailer was lost: %q", i+1, res.Trailer)
			}
		}
		if res := g.get(t, "/stream"); res.StatusCode != 429 {
			t.Fatalf("in debt: status %d, want 429", res.StatusCode)
		}
		if n := reached.Load(); n != 4 {
			t.Fatalf("upstream saw %d, want 4", n)
		}
	}
}

// A cost the upstream leaves out or garbles charges 1 and is counted;
// the cost is clamped to max_cost.
func TestAMissingOrMalformedCostChargesOne(t *testing.T) {
	costs := []string{"", "abc", "-3", "1000", "0"}
	var n atomic.Int64
	up, _ := answering(t, func(w http.ResponseWriter, r *http.Request) {
		if c := costs[n.Add(1)-1]; c != "" {
			w.Header().Set("X-Usage-Cost", c)
		}
	})
	p := policy(limitertest.TokenBucket(100, 1, time.Hour), "usage")
	p.CostHeader, p.MaxCost = "X-Usage-Cost", 50
	m := proxy.NewMetrics(prometheus.NewRegistry())
	g := newGateway(t, setup{routes: []proxy.Route{route("api", "/api", up, t, p)}, metrics: m})
	for i, want := range []int64{100, 99, 98, 97} {
		if r := remaining(t, g.get(t, "/api"), "usage"); r != want {
			t.Fatalf("call %d (cost %q): r=%d, want %d", i+1, costs[i], r, want)
		}
	}
	if r := remaining(t, g.get(t, "/api"), "usage"); r != 47 {
		t.Fatalf("after a cost of 1000 clamped to 50: r=%d, want 47", r)
	}
	if got := testutil.ToFloat64(m.CostHeaderInvalid.WithLabelValues("api", "usage")); got != 3 {
		t.Fatalf("gateway_cost_header_invalid_total %v, want 3", got)
	}
}

// failingCharges decides admissions and fails every settlement.
type failingCharges struct{ proxy.Limiter }

func (f failingCharges) Evaluate(ctx context.Context, req limiter.Request) limiter.Outcome {
	if req.Phase == limiter.Settlement {
		return limiter.Unavailable{Category: limiter.UnavailableBeforeSend}
	}
	return f.Limiter.Evaluate(ctx, req)
}

// A charge the limiter does not take leaves the response as it was: it is
// logged and counted, and the budget stays unspent.
func TestAFailedChargeNeverChangesTheResponse(t *testing.T) {
	up, _ := answering(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, "who are you")
	})
	p := policy(limitertest.FixedWindow(1, time.Minute), "failed-logins")
	p.CountStatuses = limiter.StatusSet(401)
	mem := limiter.NewMemory(limiter.MemoryOptions{})
	t.Cleanup(func() { mem.Close() })
	m := proxy.NewMetrics(prometheus.NewRegistry())
	g := newGateway(t, setup{routes: []proxy.Route{route("login", "/login", up, t, p)}, limiter: failingCharges{mem}, metrics: m})
	for i := range 3 {
		res := g.get(t, "/login")
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != 401 || string(body) != "who are you" {
			t.Fatalf("call %d: status %d, body %q; want the upstream's 401", i+1, res.StatusCode, body)
		}
	}
	if got := testutil.ToFloat64(m.ChargeFailures.WithLabelValues("login", "failed-logins")); got != 3 {
		t.Fatalf("gateway_limiter_charge_failures_total %v, want 3", got)
	}
	if !strings.Contains(g.logs.String(), "limiter charge failed") {
		t.Fatalf("no log of the failed charge: %s", g.logs.String())
	}
}

// Beside a request-counted policy, the check before forwarding is one
// decision: a refusal by the failures' budget charges the other nothing.
func TestAResponseChargedPolicyBesideARequestCountedOne(t *testing.T) {
	onEachBackend(t, aResponseChargedPolicyBesideARequestCountedOne)
}

func aResponseChargedPolicyBesideARequestCountedOne(t *testing.T, lim proxy.Limiter) {
	up, reached := answering(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
	})
	calls := redisPolicy(limitertest.FixedWindow(3, time.Hour), "calls")
	failures := redisPolicy(limitertest.FixedWindow(1, time.Hour), "failures")
	failures.CountStatuses = limiter.StatusSet(401, 403)
	g := newGateway(t, setup{routes: []proxy.Route{multiRoute("login", "/login", up, t, calls, failures)}, limiter: lim})
	res := g.get(t, "/login")
	if res.StatusCode != 403 || remaining(t, res, "calls") != 2 || remaining(t, res, "failures") != 1 {
		t.Fatalf("first: status %d, RateLimit %q", res.StatusCode, res.Header.Get("RateLimit"))
	}
	for range 2 {
		res = g.get(t, "/login")
		if res.StatusCode != 429 || remaining(t, res, "calls") != 2 || remaining(t, res, "failures") != 0 {
			t.Fatalf("after the failure: status %d, RateLimit %q; want 429, calls uncharged at 2", res.StatusCode, res.Header.Get("RateLimit"))
		}
	}
	if n := reached.Load(); n != 1 {
		t.Fatalf("upstream saw %d, want 1", n)
	}
}

// heldCharges decides admissions and holds every settlement until release
// is closed.
type heldCharges struct {
	proxy.Limiter
	started chan struct{}
	release chan struct{}
}

func (h heldCharges) Evaluate(ctx context.Context, req limiter.Request) limiter.Outcome {
	if req.Phase == limiter.Settlement {
		h.started <- struct{}{}
		<-h.release
	}
	return h.Limiter.Evaluate(ctx, req)
}

// The charge goes out beside the response: a client reads the head and
// the body while the limiter has yet to answer the charge.
func TestTheChargeDoesNotHoldTheResponseBack(t *testing.T) {
	up, _ := answering(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, "first part ")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // until the client has read the first part and hangs up
	})
	p := policy(limitertest.FixedWindow(5, time.Minute), "failed-logins")
	p.CountStatuses = limiter.StatusSet(401)
	mem := limiter.NewMemory(limiter.MemoryOptions{})
	t.Cleanup(func() { mem.Close() })
	held := heldCharges{Limiter: mem, started: make(chan struct{}, 1), release: make(chan struct{})}
	g := newGateway(t, setup{routes: []proxy.Route{route("login", "/login", up, t, p)}, limiter: held})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", g.URL+"/login", nil)
	defer close(held.release)
	read := make(chan string, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			read <- err.Error()
			return
		}
		defer res.Body.Close()
		buf := make([]byte, len("first part "))
		_, err = io.ReadFull(res.Body, buf)
		read <- fmt.Sprint(res.StatusCode, " ", string(buf), err)
	}()
	<-held.started // the charge is under way, and held
	select {
	case got := <-read:
		if got != "401 first part <nil>" {
			t.Fatalf("got %q, want the 401 and its first part", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the response waits for the charge")
	}
}

// On a plan, a response-charged policy is the plan's budget; in shadow, it
// is charged by the response like an enforced one, its would-be denials
// logged, and it refuses nothing and is in no header.
func TestAResponseChargedPolicyOnAPlanAndInShadow(t *testing.T) {
	onEachBackend(t, func(t *testing.T, lim proxy.Limiter) {
		up, reached := answering(t, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusUnauthorized)
		})
		trial := redisPolicy(limitertest.FixedWindow(1, time.Hour), "failures-trial")
		trial.CountStatuses, trial.Shadow = limiter.StatusSet(401), true
		gold := redisPolicy(limitertest.FixedWindow(3, time.Hour), "gold-failures")
		gold.CountStatuses = limiter.StatusSet(401)
		r := multiRoute("login", "/login", up, t, redisPolicy(limitertest.FixedWindow(100, time.Hour), "calls"), trial)
		r.Subject = []subject.Kind{subject.APIKey}
		r.Plans = map[string][]*limiter.Policy{"gold": {gold}}
		g := newGateway(t, setup{routes: []proxy.Route{r}, limiter: lim})

		wantStatuses(t, statuses(t, g, "/login", 4, "X-API-Key", "known-gold-key"), 401, 401, 401, 429)
		res := g.get(t, "/login", "X-API-Key", "known-gold-key")
		if got, want := res.Header.Get("RateLimit-Policy"), `"gold-failures";q=3;w=3600`; res.StatusCode != 429 || got != want {
			t.Fatalf("gold: %d, RateLimit-Policy %q; want 429 and %q", res.StatusCode, got, want)
		}

		wantStatuses(t, statuses(t, g, "/login", 4, "X-API-Key", "known-key-one"), 401, 401, 401, 401)
		res = g.get(t, "/login", "X-API-Key", "known-key-one")
		if got, want := res.Header.Get("RateLimit-Policy"), `"calls";q=100;w=3600`; got != want {
			t.Fatalf("RateLimit-Policy %q, want %q: a shadow policy is in no header", got, want)
		}
		// The trial's one failure is spent by the first 401: each later
		// request would have been refused.
		if n := strings.Count(g.logs.String(), `"policy":"failures-trial"`); n != 4 {
			t.Fatalf("%d requests shadow-denied by failures-trial, want 4:\n%s", n, g.logs)
		}
		if n := reached.Load(); n != 8 {
			t.Fatalf("upstream saw %d, want 8", n)
		}
	})
}

// droppingCharges loses the reply to the next settlement's script call,
// on the way back from Redis.
type droppingCharges struct {
	proxy.Limiter
	link *redistest.Proxy
}

func (d droppingCharges) Evaluate(ctx context.Context, req limiter.Request) limiter.Outcome {
	if req.Phase == limiter.Settlement {
		d.link.DropNextReply()
	}
	return d.Limiter.Evaluate(ctx, req)
}

// A charge whose reply Redis sent but the gateway never got is retried
// under its evaluation ID, and charged once: each failed login takes one
// from the budget, and no charge counts as failed.
func TestALostChargeReplyIsChargedOnce(t *testing.T) {
	s := redistest.Start(t)
	link := redistest.StartProxy(t, s.Addr)
	// No denial cache: its resets subscription would share the proxy,
	// and DropNextReply could drop the SUBSCRIBE reply instead.
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{link.Addr}, DenialCacheEntries: -1})
	up, _ := answering(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	})
	p := redisPolicy(limitertest.FixedWindow(5, time.Hour), "failed-logins")
	p.CountStatuses = limiter.StatusSet(401)
	m := proxy.NewMetrics(prometheus.NewRegistry())
	g := newGateway(t, setup{routes: []proxy.Route{route("login", "/login", up, t, p)}, limiter: droppingCharges{r, link}, metrics: m})
	for i, want := range []int64{5, 4, 3} {
		res := g.get(t, "/login")
		if res.StatusCode != 401 || remaining(t, res, "failed-logins") != want {
			t.Fatalf("failure %d: %d, RateLimit %q; want 401 with r=%d", i+1, res.StatusCode, res.Header.Get("RateLimit"), want)
		}
	}
	if n := link.Dropped(); n != 3 {
		t.Fatalf("%d replies dropped, want 3", n)
	}
	if got := testutil.ToFloat64(m.ChargeFailures.WithLabelValues("login", "failed-logins")); got != 0 {
		t.Fatalf("gateway_limiter_charge_failures_total %v, want 0: the retry is the charge", got)
	}
}

// The charges by the response over a Redis Cluster (three masters), each
// case with keys of its own: the failed-login form, the cost header, the
// cost trailer of a streamed body, and a response-charged policy beside a
// request-counted one, whose keys share the subject's slot.
func TestChargesByTheResponseOverRedisCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	for _, tc := range []struct {
		name string
		test func(t *testing.T, lim proxy.Limiter)
	}{
		{"failed logins counted by their status", failedLoginsAreCountedByTheirStatus},
		{"a cost header", aCostHeaderChargesItsValueAndIsRemoved},
		{"a cost trailer", aCostTrailerIsChargedAtTheEndOfAStreamedBody(true)},
		{"beside a request-counted policy", aResponseChargedPolicyBesideARequestCountedOne},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.test(t, redistest.NewLimiter(t, limiter.RedisOptions{Mode: limiter.RedisCluster, Addrs: c.Addrs(),
				KeyPrefix: "charges-" + limitertest.Subject()[3:11] + ":"}))
		})
	}
}
