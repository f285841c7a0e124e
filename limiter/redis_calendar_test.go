package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
)

// With clock = "redis" only the script knows now: it places the request
// in the calendar period that holds Redis TIME, from the boundaries the
// gateway sends, and the gateway finds the period's length again from the
// time to its end.
func TestRedisPlacesACalendarPolicyByRedisTime(t *testing.T) {
	s := redistest.Start(t)
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
	for _, c := range []struct {
		calendar limiter.Calendar
		zone     string
	}{{limiter.CalendarDay, "UTC"}, {limiter.CalendarWeek, "Pacific/Kiritimati"}, {limiter.CalendarMonth, "America/Los_Angeles"}} {
		p := limitertest.Calendar(2, c.calendar, c.zone)
		p.Clock = limiter.ClockBackend
		loc, err := time.LoadLocation(c.zone)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now().In(loc)
		y, m, d := now.Date()
		var start, end time.Time
		switch c.calendar {
		case limiter.CalendarDay:
			start, end = time.Date(y, m, d, 0, 0, 0, 0, loc), time.Date(y, m, d+1, 0, 0, 0, 0, loc)
		case limiter.CalendarWeek:
			d -= (int(now.Weekday()) + 6) % 7
			start, end = time.Date(y, m, d, 0, 0, 0, 0, loc), time.Date(y, m, d+7, 0, 0, 0, 0, loc)
		case limiter.CalendarMonth:
			start, end = time.Date(y, m, 1, 0, 0, 0, 0, loc), time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
		}
		if time.Until(end) < 10*time.Second {
			t.Skip("too close to a period's end to tell the periods apart")
		}
		req := limiter.Request{Policies: limitertest.One(p), Subject: limitertest.Subject(), Cost: 1}
		for i := range 3 {
			e, ok := r.Evaluate(context.Background(), req).(limiter.Evaluated)
			if !ok {
				t.Fatalf("%s in %s: not evaluated", c.calendar, c.zone)
			}
			if e.Allowed != (i < 2) || e.WindowSeconds != uint32(end.Sub(start)/time.Second) {
				t.Fatalf("%s in %s, request %d: %+v, want allowed %v in a period of %s", c.calendar, c.zone, i+1, e.Decision, i < 2, end.Sub(start))
			}
			if off := e.ResetAfter - time.Until(end); off < -5*time.Second || off > 5*time.Second {
				t.Fatalf("%s in %s: %s to the period's end, want %s", c.calendar, c.zone, e.ResetAfter, time.Until(end))
			}
			if i == 2 && e.RetryAfter != e.ResetAfter {
				t.Fatalf("%s in %s: a denial's retry %s, want the period's end %s", c.calendar, c.zone, e.RetryAfter, e.ResetAfter)
			}
		}
	}
}

// The largest quota a policy may have (15 digits, what RateLimit-Policy
// carries; a calendar's, exact in the script's doubles) comes back from
// Redis to the unit, not rounded to fourteen digits as Lua writes a
// number into a string.
func TestRedisRepliesWithTheLargestQuotaExactly(t *testing.T) {
	s := redistest.Start(t)
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
	const largest = 999_999_999_999_999
	p := limitertest.Calendar(largest, limiter.CalendarMonth, "UTC")
	if err := p.Exact(); err != nil {
		t.Fatal(err)
	}
	req := limiter.Request{Policies: limitertest.One(p), Subject: limitertest.Subject(), Cost: 3}
	e, ok := r.Evaluate(context.Background(), req).(limiter.Evaluated)
	if !ok || !e.Allowed || e.Remaining != largest-3 {
		t.Fatalf("%#v, want allowed with %d left", e, largest-3)
	}
}
