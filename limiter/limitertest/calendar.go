package limitertest

import (
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
)

// Calendar returns a valid fixed-window policy over the calendar's periods
// in zone, with a random name.
func Calendar(limit int64, c limiter.Calendar, zone string) *limiter.Policy {
	p := base(limiter.FixedWindow)
	p.Limit, p.Calendar, p.Timezone, p.MaxCost = limit, c, limiter.LoadTimezone(zone), limit
	return p
}

// clockAt returns a hand-moved clock set to the local time given in zone.
func clockAt(t *testing.T, zone string, year int, month time.Month, day, hour, min, sec, msec int) *Clock {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	return &Clock{now: time.Date(year, month, day, hour, min, sec, msec*int(time.Millisecond), loc)}
}

// runCalendar holds a backend to calendar windows: local midnight to
// local midnight, by the policy's clock.
func runCalendar(t *testing.T, newBackend Factory) {
	t.Run("a day quota ends at local midnight, a millisecond after the last request of the day", func(t *testing.T) {
		p := Calendar(2, limiter.CalendarDay, "Europe/Berlin")
		// The day before the spring change is 24 hours; the change's is 23.
		clock := clockAt(t, "Europe/Berlin", 2026, time.March, 28, 23, 59, 59, 999)
		b := newBackend(t, clock)
		s := Subject()
		req := limiter.Request{Policies: One(p), Subject: s, Cost: 1}
		for i, w := range []limiter.Decision{
			{Allowed: true, Remaining: 1, ResetAfter: time.Millisecond, WindowSeconds: 86400},
			{Allowed: true, Remaining: 0, ResetAfter: time.Millisecond, WindowSeconds: 86400},
			{Remaining: 0, ResetAfter: time.Millisecond, RetryAfter: time.Millisecond, WindowSeconds: 86400},
		} {
			w.Limit = 2
			if d := evaluated(t, b.Evaluate(ctx(t), req)); d != w {
				t.Fatalf("request %d before midnight: %+v, want %+v", i+1, d, w)
			}
		}
		clock.Advance(time.Millisecond)
		w := limiter.Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 23 * time.Hour, WindowSeconds: 82800}
		if d := evaluated(t, b.Evaluate(ctx(t), req)); d != w {
			t.Fatalf("the first request after midnight: %+v, want %+v", d, w)
		}
	})
	t.Run("a calendar period is as long as the calendar says", func(t *testing.T) {
		for _, c := range []struct {
			name     string
			calendar limiter.Calendar
			zone     string
			clock    func(t *testing.T) *Clock
			seconds  uint32
			reset    time.Duration
		}{
			{"the autumn change's day in Berlin is 25 hours", limiter.CalendarDay, "Europe/Berlin",
				func(t *testing.T) *Clock { return clockAt(t, "Europe/Berlin", 2026, time.October, 25, 12, 0, 0, 0) }, 90000, 12 * time.Hour},
			{"a day in UTC is 24 hours", limiter.CalendarDay, "UTC",
				func(t *testing.T) *Clock { return clockAt(t, "UTC", 2026, time.March, 29, 6, 0, 0, 0) }, 86400, 18 * time.Hour},
			{"the ISO week of the spring change runs from Monday and is 167 hours", limiter.CalendarWeek, "Europe/Berlin",
				func(t *testing.T) *Clock { return clockAt(t, "Europe/Berlin", 2026, time.March, 29, 12, 0, 0, 0) }, 167 * 3600, 12 * time.Hour},
			{"February 2026 is 28 days", limiter.CalendarMonth, "Europe/Berlin",
				func(t *testing.T) *Clock { return clockAt(t, "Europe/Berlin", 2026, time.February, 28, 23, 0, 0, 0) }, 28 * 86400, time.Hour},
			{"March 2026 in Berlin is 31 days less the hour the spring change takes", limiter.CalendarMonth, "Europe/Berlin",
				func(t *testing.T) *Clock { return clockAt(t, "Europe/Berlin", 2026, time.March, 1, 0, 0, 0, 0) }, 31*86400 - 3600, 31*24*time.Hour - time.Hour},
			{"a month in New York ends at New York's midnight", limiter.CalendarMonth, "America/New_York",
				func(t *testing.T) *Clock { return clockAt(t, "America/New_York", 2026, time.January, 31, 23, 0, 0, 0) }, 31 * 86400, time.Hour},
		} {
			t.Run(c.name, func(t *testing.T) {
				p := Calendar(5, c.calendar, c.zone)
				b := newBackend(t, c.clock(t))
				d := evaluated(t, b.Evaluate(ctx(t), limiter.Request{Policies: One(p), Subject: Subject(), Cost: 1}))
				if !d.Allowed || d.WindowSeconds != c.seconds || d.ResetAfter != c.reset {
					t.Fatalf("%+v, want allowed in a period of %ds with %s to its end", d, c.seconds, c.reset)
				}
			})
		}
	})
	t.Run("a clock behind the last request's, within the bound, stays in the period that request counted in", func(t *testing.T) {
		p := Calendar(3, limiter.CalendarDay, "Europe/Berlin")
		clock := clockAt(t, "Europe/Berlin", 2026, time.March, 29, 0, 0, 0, 1)
		b := newBackend(t, clock)
		req := limiter.Request{Policies: One(p), Subject: Subject(), Cost: 1}
		evaluated(t, b.Evaluate(ctx(t), req))
		clock.Advance(-2 * time.Millisecond) // the day before, by this clock
		w := limiter.Decision{Allowed: true, Limit: 3, Remaining: 1, ResetAfter: 23*time.Hour - time.Millisecond, WindowSeconds: 82800}
		if d := evaluated(t, b.Evaluate(ctx(t), req)); d != w {
			t.Fatalf("%+v, want %+v: counted in the day the first request was", d, w)
		}
		clock.Advance(-p.MaxClockRegression)
		if o, ok := b.Evaluate(ctx(t), req).(limiter.Unavailable); !ok || o.Category != limiter.ClockUnsafe {
			t.Fatalf("beyond the bound got %#v, want Unavailable(clock_unsafe)", o)
		}
	})
	t.Run("a retried evaluation of a calendar policy returns its first result with its period", func(t *testing.T) {
		p := Calendar(3, limiter.CalendarDay, "Europe/Berlin")
		clock := clockAt(t, "Europe/Berlin", 2026, time.October, 25, 1, 0, 0, 0)
		b := newBackend(t, clock)
		req := limiter.Request{Policies: One(p), Subject: Subject(), Cost: 1, EvaluationID: Subject()}
		first := evaluated(t, b.Evaluate(ctx(t), req))
		again := evaluated(t, b.Evaluate(ctx(t), req))
		if first != again || first.WindowSeconds != 90000 || first.Remaining != 2 {
			t.Fatalf("first %+v, retried %+v, want the same, 2 left of a 90000s day", first, again)
		}
	})
}
