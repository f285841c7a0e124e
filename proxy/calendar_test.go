package proxy_test

import (
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/proxy"
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
			up := newUpstream(t)
			p := limitertest.Calendar(2, c.calendar, c.zone)
			g := newGateway(t, setup{routes: []proxy.Route{route("quota", "/q", up, t, policy(p, "quota"))}})
			g.clock.Advance(c.at.Sub(g.clock.Now()))
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
