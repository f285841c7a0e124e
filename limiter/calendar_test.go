package limiter

import (
	"testing"
	"time"
)

// Periods tile time in every zone, those whose daylight-saving change
// skips or repeats midnight itself included: each instant lies in exactly
// one period, and a period starts where the one before ended.
func TestCalendarPeriodsTileTimeWhereMidnightIsSkipped(t *testing.T) {
	zones := []string{"UTC", "Europe/Berlin", "America/Havana", "America/Santiago", "America/Asuncion", "Asia/Beirut", "Australia/Lord_Howe", "Pacific/Apia"}
	for _, zone := range zones {
		z := LoadTimezone(zone)
		if z.err != nil {
			t.Fatal(z.err)
		}
		for _, c := range []Calendar{CalendarDay, CalendarWeek, CalendarMonth} {
			from := time.Date(2025, time.January, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
			to := time.Date(2027, time.January, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
			step := int64(15 * time.Minute / time.Millisecond)
			_, prevEnd := c.period(z, from)
			for now := from; now < to; now += step {
				start, end := c.period(z, now)
				if start > now || now >= end {
					t.Fatalf("%s %s: %s lies outside its period [%s, %s)", zone, c, time.UnixMilli(now).UTC(), time.UnixMilli(start).UTC(), time.UnixMilli(end).UTC())
				}
				if s, _ := c.period(z, end); s != end {
					t.Fatalf("%s %s: the period after [%s, %s) starts at %s", zone, c, time.UnixMilli(start).UTC(), time.UnixMilli(end).UTC(), time.UnixMilli(s).UTC())
				}
				if now >= prevEnd && start != prevEnd {
					t.Fatalf("%s %s: a period starts at %s, the one before ended at %s", zone, c, time.UnixMilli(start).UTC(), time.UnixMilli(prevEnd).UTC())
				}
				prevEnd = end
			}
		}
	}
}

// The period a backend decided in is found again from the caller's clock
// and the time to its end, when the backend's clock is off the caller's
// by seconds, and on either side of a boundary.
func TestWindowSecondsFindsThePeriodWhenTheClocksDisagree(t *testing.T) {
	berlin := LoadTimezone("Europe/Berlin")
	p := &Policy{Algorithm: FixedWindow, Calendar: CalendarDay, Timezone: berlin}
	midnight := time.Date(2026, time.March, 29, 0, 0, 0, 0, berlin.location()).UnixMilli() // a 23-hour day starts
	for _, c := range []struct {
		name        string
		backend, gw int64 // the two clocks' now
		wantSeconds uint32
	}{
		{"the backend a millisecond before midnight, the gateway 3s after", midnight - 1, midnight + 3000, 86400},
		{"the backend a millisecond after midnight, the gateway 3s before", midnight + 1, midnight - 3000, 82800},
		{"both just after midnight", midnight + 1, midnight + 1, 82800},
		{"both just before midnight", midnight - 1, midnight - 1, 86400},
	} {
		_, end := p.windowAt(c.backend)
		if got := p.windowSeconds(c.gw, ms(end-c.backend)); got != c.wantSeconds {
			t.Errorf("%s: %d seconds, want %d", c.name, got, c.wantSeconds)
		}
	}
}
