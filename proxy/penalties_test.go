package proxy_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
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

const typeAbnormalUsage = "https://iana.org/assignments/http-problem-types#abnormal-usage-detected"

// penalizedRoute is a route of 2 a minute per address, whose policy puts
// a subject that goes over in the penalty box for penalty.
func penalizedRoute(t *testing.T, penalty time.Duration) proxy.Route {
	p := redisPolicy(limitertest.FixedWindow(2, time.Minute), "per-minute")
	p.Penalty = penalty
	rt := route("orders", "/", newUpstream(t), t, p)
	rt.Subject = []subject.Kind{subject.ClientIP}
	return rt
}

// penalized reports whether res is the penalty box's answer, with a
// Retry-After of at most max.
func penalized(t *testing.T, res *http.Response, max time.Duration) bool {
	t.Helper()
	if res.StatusCode != http.StatusTooManyRequests || problemType(t, res) != typeAbnormalUsage {
		return false
	}
	retry, err := strconv.Atoi(res.Header.Get("Retry-After"))
	if err != nil || retry < 1 || time.Duration(retry)*time.Second > max {
		t.Fatalf("Retry-After %q for a penalty of %s", res.Header.Get("Retry-After"), max)
	}
	return true
}

// within polls cond every 10 ms for d, and reports whether it held.
func within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A penalty imposed by one gateway refuses the subject on another that
// shares its Redis within a second, the deciding one at once; DELETE
// /v1/penalties on either lifts it everywhere within a second; other
// subjects are not touched, and the listing shows pseudonyms only.
func TestPenaltyIsSharedByTwoGatewaysOnOneRedis(t *testing.T) {
	s := redistest.Start(t)
	rt := penalizedRoute(t, time.Hour)
	newOne := func() *gateway {
		return newGateway(t, setup{routes: []proxy.Route{rt}, trusted: []string{"127.0.0.1/32"}, adminToken: testAdminToken,
			limiter: redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})})
	}
	a, b := newOne(), newOne()
	from := []string{"X-Forwarded-For", "203.0.113.5"}
	wantStatuses(t, statuses(t, a, "/", 2, from...), 200, 200)
	over := time.Now()
	if res := a.get(t, "/", from...); !penalized(t, res, time.Hour) {
		t.Fatalf("going over on A: %d %s", res.StatusCode, problemType(t, res))
	}
	if !within(time.Second-time.Since(over), func() bool { return penalized(t, b.get(t, "/", from...), time.Hour) }) {
		t.Fatal("B did not refuse the subject within 1 s")
	}
	if res := b.get(t, "/", "X-Forwarded-For", "198.51.100.9"); res.StatusCode != 200 {
		t.Fatalf("another subject on B: %d", res.StatusCode)
	}
	if list := listPenalties(t, b); len(list) != 1 || list[0].Policy != "per-minute" || list[0].RetryAfter > 3600 ||
		!strings.HasPrefix(list[0].Pseudonym, "v1:") {
		t.Fatalf("GET /v1/penalties on B: %+v", list)
	}
	lift := "/v1/penalties?route=orders&subject=" + url.QueryEscape("client_ip:203.0.113.5")
	if status, body := adminCall(t, a, "DELETE", lift, ""); status != http.StatusNoContent {
		t.Fatalf("DELETE on A: %d %s", status, body)
	}
	// Lifted, the subject's window is still spent: its next request is
	// refused by the policy, which penalizes it again. So B's listing
	// says the lift reached it.
	if !within(time.Second, func() bool { return len(listPenalties(t, b)) == 0 }) {
		t.Fatal("B still holds the penalty a second after the lift")
	}
	if status, _ := adminCall(t, a, "DELETE", lift, ""); status != http.StatusNotFound {
		t.Fatalf("a second DELETE: %d, want 404", status)
	}
}

// A penalty holds whatever the budget holds, ends by itself after its
// length, and on memory is this process's alone; a reload that removes
// the policy's penalty lifts it.
func TestPenaltyEndsByTimeAndByReload(t *testing.T) {
	up := newUpstream(t)
	penalizedRoute := func(penalty time.Duration) proxy.Route {
		p := policy(limitertest.FixedWindow(2, time.Hour), "per-hour")
		p.Penalty = penalty
		rt := route("orders", "/", up, t, p)
		rt.Subject = []subject.Kind{subject.ClientIP}
		return rt
	}
	m := proxy.NewMetrics(prometheus.NewRegistry())
	g := newGateway(t, setup{routes: []proxy.Route{penalizedRoute(time.Second)}, adminToken: testAdminToken, metrics: m})
	wantStatuses(t, statuses(t, g, "/", 2), 200, 200)
	if !penalized(t, g.get(t, "/"), time.Second) {
		t.Fatal("going over: not penalized")
	}
	g.clock.Advance(time.Hour) // a whole budget again
	if !penalized(t, g.get(t, "/"), time.Second) {
		t.Fatal("a new window let the subject out of the penalty box")
	}
	if !within(3*time.Second, func() bool { return g.get(t, "/").StatusCode == 200 }) {
		t.Fatal("the penalty of 1 s did not end")
	}
	wantStatuses(t, statuses(t, g, "/", 1), 200)
	if !penalized(t, g.get(t, "/"), time.Second) {
		t.Fatal("not penalized again after the policy refused again")
	}
	if n := testutil.ToFloat64(m.Penalties.WithLabelValues("orders", "per-hour")); n != 2 {
		t.Fatalf("gateway_limiter_penalties_total %v, want 2", n)
	}
	// A reload without the penalty lifts the one in force: the policy's
	// own refusal is what is left.
	if err := g.handler.Swap(proxy.Config{Routes: []proxy.Route{penalizedRoute(0)}, Resolver: newResolver(t, nil), Limiter: g.lim, AdminToken: testAdminToken}); err != nil {
		t.Fatal(err)
	}
	if res := g.get(t, "/"); res.StatusCode != http.StatusTooManyRequests || problemType(t, res) == typeAbnormalUsage {
		t.Fatalf("after a reload removed the penalty: %d %s", res.StatusCode, problemType(t, res))
	}
}

type listedPenalty struct {
	Policy, Pseudonym string
	RetryAfter        int64 `json:"retry_after"`
}

// listPenalties is GET /v1/penalties?route=orders on g; it fails the test
// when the answer names the test's address.
func listPenalties(t *testing.T, g *gateway) []listedPenalty {
	t.Helper()
	status, body := adminCall(t, g, "GET", "/v1/penalties?route=orders", "")
	var v struct{ Penalties []listedPenalty }
	if status != http.StatusOK || json.Unmarshal([]byte(body), &v) != nil || strings.Contains(body, "203.0.113.5") {
		t.Fatalf("GET /v1/penalties: %d %s", status, body)
	}
	return v.Penalties
}

// problemType is the problem type of res's body, which it leaves readable.
func problemType(t *testing.T, res *http.Response) string {
	t.Helper()
	b, _ := io.ReadAll(res.Body)
	res.Body = io.NopCloser(bytes.NewReader(b))
	return problemTypeOf(t, b)
}
