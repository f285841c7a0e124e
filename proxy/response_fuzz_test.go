package proxy_test

import (
	"math"
	"math/big"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
)

// The largest Structured Field integer (RFC 9651): 15 digits.
const maxSFInteger = 999_999_999_999_999

var (
	rateLimitField       = regexp.MustCompile(`^"p";r=([0-9]+);t=([0-9]+)$`)
	rateLimitPolicyField = regexp.MustCompile(`^"p";q=([0-9]+);w=([0-9]+)$`)
)

// FuzzRateLimitArithmetic drives the 429 a denial is answered with, from a
// policy and a decision built from fuzzed numbers (times in milliseconds).
// Retry-After is the decision's RetryAfter rounded up to whole seconds, and
// at least 1: a client that waits what it says is never early. RateLimit's
// r and t are the remaining quota and ResetAfter rounded up, never negative.
// When the policy is one the configuration accepts and the decision one a
// backend can make (RetryAfter <= ResetAfter <= the algorithm's horizon,
// Remaining <= the quota), every number stays within the horizon and fits
// a Structured Field integer.
func FuzzRateLimitArithmetic(f *testing.F) {
	const maxMillis = math.MaxInt64 / int64(time.Millisecond)
	for _, seed := range []struct {
		algorithm                           uint8
		quota, refillTokens, periodMillis   int64
		remaining, resetMillis, retryMillis int64
	}{
		{0, 5, 0, 60_000, 0, 42_500, 42_500},
		{1, 2, 0, 60_000, 0, 119_000, 61_000},
		{2, 20, 5, 1_000, 3, 4_000, 1_000},
		{0, 1, 0, 1, 0, 1, 1},
		{0, 10, 0, 1_500, 0, 0, 0},
		{0, maxSFInteger, 0, 1, maxSFInteger - 1, 1, 1},
		// The longest window a duration holds.
		{0, 1, 0, maxMillis, 0, maxMillis, maxMillis},
		{2, 1, 1, maxMillis, 0, maxMillis, maxMillis},
		// No backend says these.
		{0, 5, 0, 60_000, -3, -1, -1},
		{0, 5, 0, 60_000, math.MaxInt64, math.MaxInt64, math.MinInt64},
	} {
		f.Add(seed.algorithm, seed.quota, seed.refillTokens, seed.periodMillis, seed.remaining, seed.resetMillis, seed.retryMillis)
	}

	up := "http://upstream.test"
	resolver := newResolver(f, nil)
	h, err := proxy.NewHandler(proxy.Options{Transport: echoTransport{}}, proxy.Config{
		Routes:   []proxy.Route{{OperationID: "r", Path: "/", Upstream: up}},
		Resolver: resolver,
		Limiter:  stubLimiter{},
	})
	if err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, algorithm uint8, quota, refillTokens, periodMillis, remaining, resetMillis, retryMillis int64) {
		if periodMillis < 0 || periodMillis > maxMillis {
			return // not a duration
		}
		p := &limiter.Policy{
			Name: "p", Algorithm: limiter.Algorithm(algorithm%3 + 1), Revision: 1, MaxCost: 1,
			CleanupGrace: limiter.DefaultCleanupGrace, MaxClockRegression: limiter.DefaultMaxClockRegression,
		}
		period := time.Duration(periodMillis) * time.Millisecond
		if p.Algorithm == limiter.TokenBucket {
			p.Capacity, p.RefillTokens, p.RefillPeriod = quota, refillTokens, period
		} else {
			p.Limit, p.Window = quota, period
		}
		if p.Validate() != nil {
			return
		}
		d := limiter.Decision{
			Limit: p.Quota(), Remaining: remaining,
			ResetAfter: millis(resetMillis), RetryAfter: millis(retryMillis),
		}
		if err := h.Swap(proxy.Config{
			Routes:   []proxy.Route{{OperationID: "r", Path: "/", Upstream: up, Policies: onePolicy(p), Subject: []subject.Kind{subject.ClientIP}, Cost: 1}},
			Resolver: resolver,
			Limiter:  stubLimiter{limiter.Evaluated{Decision: d}},
		}); err != nil {
			t.Fatalf("a valid policy was refused: %v", err)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		if w.Code != http.StatusTooManyRequests {
			t.Fatalf("status %d, want 429", w.Code)
		}

		retryAfter, err := strconv.ParseInt(w.Header().Get("Retry-After"), 10, 64)
		if err != nil || w.Header().Get("Retry-After") != strconv.FormatInt(retryAfter, 10) {
			t.Fatalf("Retry-After %q is not a whole number of seconds", w.Header().Get("Retry-After"))
		}
		if want := max(ceilSeconds(d.RetryAfter), 1); retryAfter != want {
			t.Fatalf("Retry-After %d for a RetryAfter of %s, want %d", retryAfter, d.RetryAfter, want)
		}
		field := rateLimitField.FindStringSubmatch(w.Header().Get("RateLimit"))
		if field == nil {
			t.Fatalf("RateLimit %q is not \"p\";r=<digits>;t=<digits>", w.Header().Get("RateLimit"))
		}
		r, rerr := strconv.ParseInt(field[1], 10, 64)
		reset, terr := strconv.ParseInt(field[2], 10, 64)
		if rerr != nil || terr != nil || r != max(remaining, 0) || reset != ceilSeconds(d.ResetAfter) {
			t.Fatalf("RateLimit %q for Remaining %d and ResetAfter %s", w.Header().Get("RateLimit"), remaining, d.ResetAfter)
		}
		policyField := rateLimitPolicyField.FindStringSubmatch(w.Header().Get("RateLimit-Policy"))
		if policyField == nil {
			t.Fatalf("RateLimit-Policy %q is not \"p\";q=<digits>;w=<digits>", w.Header().Get("RateLimit-Policy"))
		}

		horizon, ok := horizonOf(p)
		if !ok || !configAccepts(p) ||
			d.RetryAfter < 0 || d.RetryAfter > d.ResetAfter || d.ResetAfter > horizon || remaining < 0 || remaining > p.Quota() {
			return // no backend says this; the syntax above is all there is to hold
		}
		if bound := max(ceilSeconds(horizon), 1); retryAfter > bound || reset > bound {
			t.Fatalf("Retry-After %d and t=%d for a horizon of %s (%d s)", retryAfter, reset, horizon, bound)
		}
		for _, n := range append(field[1:], policyField[1:]...) {
			if len(n) > 15 {
				t.Fatalf("RateLimit %q, RateLimit-Policy %q: %s has more than 15 digits", w.Header().Get("RateLimit"), w.Header().Get("RateLimit-Policy"), n)
			}
		}
	})
}

// millis is ms milliseconds, held at the duration's bounds.
func millis(ms int64) time.Duration {
	const limit = math.MaxInt64 / int64(time.Millisecond)
	switch {
	case ms > limit:
		return math.MaxInt64
	case ms < -limit:
		return math.MinInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// ceilSeconds is d in seconds rounded up, or 0 for no time, computed so
// that it cannot overflow.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := d / time.Second
	if d%time.Second != 0 {
		s++
	}
	return int64(s)
}

// horizonOf is the longest a backend may tell a denied client to wait: the
// window, the time a drained bucket takes to fill, or for the sliding
// counter two windows, since the previous window still weighs until the
// end of the current one (lua/sliding_counter.lua resets at 2*window -
// elapsed). It is false when the horizon is beyond what a duration holds.
func horizonOf(p *limiter.Policy) (time.Duration, bool) {
	var n big.Int
	switch p.Algorithm {
	case limiter.TokenBucket:
		periods := (p.Capacity-1)/p.RefillTokens + 1
		n.Mul(big.NewInt(periods), big.NewInt(int64(p.RefillPeriod)))
	case limiter.SlidingCounter:
		n.Mul(big.NewInt(2), big.NewInt(int64(p.Window)))
	default:
		n.SetInt64(int64(p.Window))
	}
	if !n.IsInt64() {
		return 0, false
	}
	return time.Duration(n.Int64()), true
}

// configAccepts reports whether the configuration file could hold p: its
// quota and window fit the headers, and the quota times the period in
// milliseconds stays below 2^51 (config/policy.go).
func configAccepts(p *limiter.Policy) bool {
	period := p.Window
	if p.Algorithm == limiter.TokenBucket {
		period = p.RefillPeriod
	}
	var product big.Int
	product.Mul(big.NewInt(p.Quota()), big.NewInt(max(period.Milliseconds(), 1)))
	return p.Quota() <= maxSFInteger && product.Cmp(big.NewInt(1<<51)) <= 0
}
