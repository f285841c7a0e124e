package limiter

import (
	"strconv"
	"time"

	"github.com/edgegate/gateway/internal/option"
)

// Calendar aligns a fixed window to the calendar of the policy's Timezone:
// the window is the day, the ISO week (from Monday) or the month that holds
// the request, from local midnight at its start to local midnight at the
// next one's. Its length follows the calendar: a day of a daylight-saving
// change is 23 or 25 hours, February is shorter than March. The zero
// Calendar is none: the policy's Window applies.
type Calendar uint8

const (
	CalendarDay Calendar = iota + 1
	CalendarWeek
	CalendarMonth
)

var calendarNames = [...]string{CalendarDay: "day", CalendarWeek: "week", CalendarMonth: "month"}

func (c Calendar) String() string {
	if c > 0 && int(c) < len(calendarNames) {
		return calendarNames[c]
	}
	return "none"
}

// ParseCalendar maps a configuration name to a Calendar; an unknown name
// is an *option.Error of the field calendar.
func ParseCalendar(s string) (Calendar, error) {
	for c := CalendarDay; int(c) < len(calendarNames); c++ {
		if calendarNames[c] == s {
			return c, nil
		}
	}
	return 0, option.Unknown("calendar", "Unknown calendar", s, calendarNames[CalendarDay:])
}

// Timezone is a policy's IANA time zone, loaded once by LoadTimezone; a
// zone that failed to load keeps its error for Policy.Validate to report.
// The zero Timezone is UTC. It is comparable, as a Policy must be.
type Timezone struct {
	name string
	loc  *time.Location
	err  error
}

// LoadTimezone loads the IANA time zone name ("Europe/Berlin", "UTC").
// The binary carries the zone data (package main imports time/tzdata), so
// a zone loads on a machine without any. "UTC", the default, is the zero
// Timezone: writing it changes nothing.
func LoadTimezone(name string) Timezone {
	switch name {
	case "UTC":
		return Timezone{}
	case "Local", "":
		// The machine's own zone, which another machine would count other
		// days in, and no zone at all: time.LoadLocation takes both.
		return Timezone{name: name, err: notIANAError(name)}
	}
	loc, err := time.LoadLocation(name)
	return Timezone{name: name, loc: loc, err: err}
}

type notIANAError string

func (e notIANAError) Error() string { return strconv.Quote(string(e)) + " is not an IANA name" }

func (z Timezone) String() string {
	if z.name == "" {
		return "UTC"
	}
	return z.name
}

func (z Timezone) location() *time.Location {
	if z.loc == nil {
		return time.UTC
	}
	return z.loc
}

// date is a local calendar date; time.Date normalizes one out of range.
type date struct {
	year  int
	month time.Month
	day   int
}

// first is the first date of the period that holds t's date.
func (c Calendar) first(t time.Time) date {
	y, m, d := t.Date()
	switch c {
	case CalendarWeek:
		d -= (int(t.Weekday()) + 6) % 7 // ISO: Monday is the first day
	case CalendarMonth:
		d = 1
	}
	return date{y, m, d}
}

// add is the first date of the period n periods after the one starting at d.
func (c Calendar) add(d date, n int) date {
	switch c {
	case CalendarWeek:
		d.day += 7 * n
	case CalendarMonth:
		d.month += time.Month(n)
	default:
		d.day += n
	}
	return d
}

func midnight(d date, loc *time.Location) int64 {
	return time.Date(d.year, d.month, d.day, 0, 0, 0, 0, loc).UnixMilli()
}

// period is the calendar period that holds the instant nowMillis, [start,
// end) in Unix milliseconds. Periods run from one local midnight to the
// next, each midnight a function of its date alone, so they tile time
// without a gap or an overlap. Where a daylight-saving change skips or
// repeats midnight itself (some zones change at 00:00), time.Date places it
// on one side of the change; the instant may then fall in the neighbouring
// period, which the two checks at the end find.
func (c Calendar) period(z Timezone, nowMillis int64) (start, end int64) {
	loc := z.location()
	d := c.first(time.UnixMilli(nowMillis).In(loc))
	start, end = midnight(d, loc), midnight(c.add(d, 1), loc)
	switch {
	case nowMillis >= end:
		start, end = end, midnight(c.add(d, 2), loc)
	case nowMillis < start:
		start, end = midnight(c.add(d, -1), loc), start
	}
	return start, end
}

// windowAt is the fixed window that holds nowMillis, [start, end) in Unix
// milliseconds: the calendar period, or the multiple of Window.
func (p *Policy) windowAt(nowMillis int64) (start, end int64) {
	if p.Calendar != 0 {
		return p.Calendar.period(p.Timezone, nowMillis)
	}
	window := p.Window.Milliseconds()
	start = nowMillis - nowMillis%window
	return start, start + window
}

// windowSeconds is the length in whole seconds of the calendar period a
// backend decided in, found from when the caller read its clock and the
// time to the window's end the backend reported; 0 for a policy without a
// calendar. The backend's clock (Redis TIME) may be seconds off the
// caller's, so the period is the one whose end lies nearest: periods are
// at least 23 hours apart, so it is the right one for any skew below half
// of that.
func (p *Policy) windowSeconds(nowMillis int64, resetAfter time.Duration) uint32 {
	if p.Calendar == 0 {
		return 0
	}
	approx := nowMillis + resetAfter.Milliseconds()
	start, end := p.Calendar.period(p.Timezone, approx)
	if approx-start <= end-approx {
		end = start
		start, _ = p.Calendar.period(p.Timezone, end-1)
	}
	return uint32((end - start + 999) / 1000)
}

// calendarBounds is what a Redis script needs to place a calendar policy's
// request by its own clock: the period boundaries around the caller's now,
// in Unix milliseconds, comma-separated, ascending. It holds the period
// before the caller's, the caller's and the one after, so a script whose
// clock is off the caller's by anything short of a whole period finds its
// own; until is when the caller's period ends and the list must be made
// again.
type calendarBounds struct {
	from, until int64 // the caller's period, for which the list is right
	arg         any   // the list, a string boxed once
}

func (c Calendar) bounds(z Timezone, nowMillis int64) *calendarBounds {
	start, end := c.period(z, nowMillis)
	before, _ := c.period(z, start-1)
	_, after := c.period(z, end)
	b := make([]byte, 0, 4*14+3)
	for i, t := range [4]int64{before, start, end, after} {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, t, 10)
	}
	return &calendarBounds{from: start, until: end, arg: any(string(b))}
}
