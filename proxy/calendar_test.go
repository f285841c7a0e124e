package proxy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
)

// A calendar quota's RateLimit-Policy w is the length of the period the
// request counted in, RateLimit t and a denial's Retry-After the seconds to
// its end: over a real listener, with the limiter's clock set by hand to
// daylight-saving days and to months of different lengths.
func TestCalendarQuotaHeadersFollowThePeriod(t *testing.T) {
	for _, c := range []struct {
		name     string
		calendar limiter.Calendar
		zone     string
		at       time.Time // local time in zone
		w, left  string    // RateLimit-Policy w, and the seconds to the period's end
	}{
		{"a day of the spring change in Berlin is 23 hours", limiter.CalendarDay, "Europe/Berlin",
			date(t, "Europe/Berlin", 2026, time.March, 29, 12), "82800", "43200"},
		{"a day of the autumn change in Berlin is 25 hours", limiter.CalendarDay, "Europe/Berlin",
			date(t, "Europe/Berlin", 2026, time.October, 25, 12), "90000", "43200"},
		{"the day before the spring change is 24 hours", limiter.CalendarDay, "Europe/Berlin",
			date(t, "Europe/Berlin", 2026, time.March, 28, 12), "86400", "43200"},
		{"February 2026 is 28 days", limiter.CalendarMonth, "UTC",
			date(t, "UTC", 2026, time.February, 28, 12), "2419200", "43200"},
		{"March 2026 is 31 days", limiter.CalendarMonth, "UTC",
			date(t, "UTC", 2026, time.March, 31, 12), "2678400", "43200"},
	} {
		t.Run(c.name, func(t *testing.T) {
			onEachBackendAt(t, c.at, func(t *testing.T, lim proxy.Limiter) {
				up := newUpstream(t)
				p := limitertest.Calendar(2, c.calendar, c.zone)
				g := newGateway(t, setup{routes: []proxy.Route{route("quota", "/q", up, t, policy(p, "quota"))}, limiter: lim})
				for i := range 2 {
					res := g.get(t, "/q", "X-API-Key", "known-key-one")
					if res.StatusCode != 200 {
						t.Fatalf("request %d: %d, want 200", i+1, res.StatusCode)
					}
					if got, want := res.Header.Get("RateLimit-Policy"), `"quota";q=2;w=`+c.w; got != want {
						t.Fatalf("request %d: RateLimit-Policy %q, want %q", i+1, got, want)
					}
					if got, want := res.Header.Get("RateLimit"), `"quota";r=`+string(rune('1'-i))+`;t=`+c.left; got != want {
						t.Fatalf("request %d: RateLimit %q, want %q", i+1, got, want)
					}
				}
				res := g.get(t, "/q", "X-API-Key", "known-key-one")
				if res.StatusCode != 429 || res.Header.Get("Retry-After") != c.left || res.Header.Get("RateLimit-Policy") != `"quota";q=2;w=`+c.w {
					t.Fatalf("the third request: %d, Retry-After %q, RateLimit-Policy %q; want 429 after %s in a period of %s",
						res.StatusCode, res.Header.Get("Retry-After"), res.Header.Get("RateLimit-Policy"), c.left, c.w)
				}
				if up.count() != 2 {
					t.Fatalf("%d requests reached the upstream, want 2", up.count())
				}
			})
		})
	}
}

// onEachBackendAt runs test on memory and on a standalone Redis whose
// calendar policies (limitertest.Calendar: clock = "gateway") read a
// clock set to at.
func onEachBackendAt(t *testing.T, at time.Time, test func(t *testing.T, lim proxy.Limiter)) {
	clock := limitertest.NewClock()
	clock.Advance(at.Sub(clock.Now()))
	t.Run("memory", func(t *testing.T) {
		m := limiter.NewMemory(limiter.MemoryOptions{Clock: clock})
		t.Cleanup(func() { m.Close() })
		test(t, m)
	})
	t.Run("redis", func(t *testing.T) {
		s := redistest.Start(t)
		test(t, redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}, Clock: clock}))
	})
}

// A plan's monthly quota gives its subjects the month's w; a shadow
// calendar policy is charged, never refuses and is in no header.
func TestCalendarQuotaOnAPlanAndInShadow(t *testing.T) {
	onEachBackendAt(t, date(t, "Europe/Berlin", 2026, time.February, 10, 12), calendarQuotaOnAPlanAndInShadow)
}

// The same over a Redis Cluster of three masters.
func TestCalendarQuotaOverRedisCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	clock := limitertest.NewClock()
	clock.Advance(date(t, "Europe/Berlin", 2026, time.February, 10, 12).Sub(clock.Now()))
	calendarQuotaOnAPlanAndInShadow(t, redistest.NewLimiter(t, limiter.RedisOptions{Mode: limiter.RedisCluster, Addrs: c.Addrs(), Clock: clock}))
}

// calendarQuotaOnAPlanAndInShadow needs a limiter whose calendar policies
// read a clock set to February 10th, 2026, noon in Berlin.
func calendarQuotaOnAPlanAndInShadow(t *testing.T, lim proxy.Limiter) {
	up := newUpstream(t)
	r := route("orders.read", "/orders", up, t, policy(limitertest.FixedWindow(100, time.Minute), "free"))
	r.Subject = []subject.Kind{subject.APIKey}
	trial := policy(limitertest.Calendar(1, limiter.CalendarDay, "Europe/Berlin"), "trial-day")
	trial.Shadow = true
	r.Policies = append(r.Policies, trial)
	r.Plans = map[string][]*limiter.Policy{"gold": {policy(limitertest.Calendar(3, limiter.CalendarMonth, "Europe/Berlin"), "gold-monthly")}}
	g := newGateway(t, setup{routes: []proxy.Route{r}, limiter: lim})
	wantStatuses(t, statuses(t, g, "/orders", 4, "X-API-Key", "known-gold-key"), 200, 200, 200, 429)
	res := g.get(t, "/orders", "X-API-Key", "known-gold-key")
	if got, want := res.Header.Get("RateLimit-Policy"), `"gold-monthly";q=3;w=2419200`; got != want {
		t.Fatalf("gold RateLimit-Policy %q, want %q (February)", got, want)
	}
	if got, want := res.Header.Get("Retry-After"), "1598400"; got != want {
		t.Fatalf("gold Retry-After %q, want %q: 18.5 days to March 1st, Berlin's midnight", got, want)
	}
	wantStatuses(t, statuses(t, g, "/orders", 3, "X-API-Key", "known-key-one"), 200, 200, 200)
	res = g.get(t, "/orders", "X-API-Key", "known-key-one")
	if got, want := res.Header.Get("RateLimit-Policy"), `"free";q=100;w=60`; got != want {
		t.Fatalf("RateLimit-Policy %q, want %q: a shadow policy is in no header", got, want)
	}
	if n := strings.Count(g.logs.String(), `"outcome":"shadow_denied"`); n != 3 {
		t.Fatalf("%d shadow_denied lines, want 3 (the day's trial of 1, then 3 more):\n%s", n, g.logs)
	}
}

// Beside a calendar policy, another policy's w is its own window.
func TestCalendarQuotaBesideAnotherPolicy(t *testing.T) {
	up := newUpstream(t)
	daily := policy(limitertest.Calendar(100, limiter.CalendarDay, "Europe/Berlin"), "daily")
	burst := policy(limitertest.FixedWindow(10, time.Minute), "burst")
	r := route("quota", "/q", up, t, nil)
	r.Policies = []*limiter.Policy{burst, daily}
	g := newGateway(t, setup{routes: []proxy.Route{r}})
	g.clock.Advance(date(t, "Europe/Berlin", 2026, time.October, 25, 23).Sub(g.clock.Now()))
	res := g.get(t, "/q", "X-API-Key", "known-key-one")
	if got, want := res.Header.Get("RateLimit-Policy"), `"burst";q=10;w=60, "daily";q=100;w=90000`; res.StatusCode != 200 || got != want {
		t.Fatalf("%d, RateLimit-Policy %q, want 200 and %q", res.StatusCode, got, want)
	}
	if got, want := res.Header.Get("RateLimit"), `"burst";r=9;t=60, "daily";r=99;t=3600`; got != want {
		t.Fatalf("RateLimit %q, want %q", got, want)
	}
}

func date(t *testing.T, zone string, year int, month time.Month, day, hour int) time.Time {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	return time.Date(year, month, day, hour, 0, 0, 0, loc)
}
