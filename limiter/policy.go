package limiter

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/edgegate/gateway/internal/option"
)

// ClockSource says whose clock a backend uses to place a request in time.
type ClockSource uint8

const (
	// ClockBackend is the store's own clock (Redis TIME inside the script),
	// shared by every gateway instance. The memory backend's store is the
	// process, so there the two sources are the same clock.
	ClockBackend ClockSource = iota
	// ClockGateway is the caller's injected clock.
	ClockGateway
)

// clockNames are the ClockSources as a policy's clock attribute names
// them, by value.
var clockNames = []string{ClockBackend: "redis", ClockGateway: "gateway"}

func (c ClockSource) String() string { return clockNames[c] }

// ParseClock maps a configuration name to a ClockSource; an unknown name is
// an *option.Error of the field clock.
func ParseClock(s string) (ClockSource, error) {
	if i := slices.Index(clockNames, s); i >= 0 {
		return ClockSource(i), nil
	}
	return 0, option.Unknown("clock", "Unknown clock", s, clockNames)
}

// ParseMode reads a policy's mode: "enforce", or "shadow" (Policy.Shadow);
// an unknown name is an *option.Error of the field mode.
func ParseMode(s string) (shadow bool, err error) {
	switch s {
	case "enforce":
		return false, nil
	case "shadow":
		return true, nil
	}
	return false, option.Unknown("mode", "Unknown mode", s, []string{"enforce", "shadow"})
}

// Dedup bounds the per-key memory of evaluation IDs that lets a retried
// evaluation return its first result without being charged again.
type Dedup struct {
	Enabled    bool
	TTL        time.Duration
	MaxEntries int
	MaxBytes   int
}

// DefaultDedup is the de-duplication a policy gets unless it says otherwise.
var DefaultDedup = Dedup{Enabled: true, TTL: 5 * time.Second, MaxEntries: 256, MaxBytes: 64 << 10}

// Policy is one compiled limit. Which fields apply depends on Algorithm:
// Limit and Window for the window algorithms, Capacity, RefillTokens and
// RefillPeriod for the token bucket, Limit and LeaseTTL for concurrency.
// A Policy is immutable once built.
type Policy struct {
	Name      string
	Algorithm Algorithm
	Revision  int64

	Limit  int64
	Window time.Duration
	// Calendar, on a fixed-window policy, replaces Window: the window is
	// the day, ISO week or month of Timezone that holds the request.
	Calendar Calendar
	Timezone Timezone

	Capacity     int64
	RefillTokens int64
	RefillPeriod time.Duration

	// LeaseTTL is how long a concurrency lease lives unless renewed: the
	// longest a lease of a gateway that died (or a release that was lost)
	// keeps a slot. A holder renews at a third of it.
	LeaseTTL time.Duration

	// MaxDelay, on a token-bucket or fixed-window policy, turns a refusal
	// into a wait: a request that could be admitted within MaxDelay is
	// admitted at once with a delay (Decision.Delay), its place reserved
	// now, and its caller holds it that long before it goes on (a request
	// whose caller cannot hold it, Request.MayDelay, is refused as
	// without). A bucket goes into debt by at most what refills within
	// MaxDelay; a window full for the request reserves its place in the
	// next window when that starts within MaxDelay. 0: off.
	MaxDelay time.Duration

	// Lease, on a fixed-window or token-bucket policy, lets a gateway
	// instance on Redis take up to Lease units at once, in one script call,
	// and admit from them locally until they are spent or the policy's
	// period ends (budget_lease.go); 0 or 1 is off. Across every instance
	// no more is admitted than without it; an instance may refuse early by
	// what the other instances hold unused, at most Lease/2 + Lease units
	// each (leases are fetched ahead).
	// The memory backend is exact and local: it has no use for it.
	Lease int64

	// Penalty puts a subject the policy refuses in the penalty box for
	// that long: the caller refuses it on the route until then, whatever
	// its budgets hold (penalty.go). 0: off; at least MinPenalty.
	Penalty time.Duration

	// Shadow policies are decided and charged like enforced ones, but a
	// denial of theirs never refuses a request: the caller forwards it and
	// reports the would-be denial. In a request with several policies, a
	// shadow policy's denial does not stop the others from being charged.
	Shadow bool

	// CountStatuses and CostHeader make the policy charged by the
	// upstream's response instead of when the request is admitted (see
	// Phase): 1 for a response whose status is in CountStatuses, or the
	// integer the response header or trailer CostHeader carries (at most
	// MaxCost). At most one of the two is set.
	CountStatuses Statuses
	CostHeader    string
	// Reserve, on a policy charged by the response, is what an admission
	// charges at once, atomically with the request's other policies, and
	// holds until the response settles it (Admitted.Settlement): a budget
	// with r units left admits at most r / Reserve requests at once. At
	// least 1 and at most MaxCost; any other policy ignores it.
	Reserve int64

	MaxCost            int64
	CleanupGrace       time.Duration
	MaxClockRegression time.Duration
	Clock              ClockSource
	Dedup              Dedup
}

// NewPolicy is a policy named name of algorithm alg with each optional
// field at its default, the one place these defaults are set: revision
// 1, max_cost 1, reserve DefaultReserve, cleanup_grace DefaultCleanupGrace, max_clock_regression
// DefaultMaxClockRegression, de-duplication DefaultDedup, a concurrency
// policy's lease_ttl DefaultLeaseTTL, the backend's clock, enforced. The
// caller sets the algorithm's own fields (limit, window, capacity...) and
// whatever else it changes, and then has it checked (Validate).
func NewPolicy(name string, alg Algorithm) *Policy {
	p := &Policy{Name: name, Algorithm: alg, Revision: 1, MaxCost: 1, Reserve: DefaultReserve,
		CleanupGrace: DefaultCleanupGrace, MaxClockRegression: DefaultMaxClockRegression,
		Clock: ClockBackend, Dedup: DefaultDedup}
	if slices.Contains(Algorithms(), alg) && p.HoldsLeases() {
		p.LeaseTTL = DefaultLeaseTTL
	}
	return p
}

// MaxHeaderInteger is the largest Structured Field integer (RFC 9651, 15
// digits): every quota must fit the RateLimit headers.
const MaxHeaderInteger = 999_999_999_999_999

// Defaults for the optional policy attributes.
const (
	DefaultCleanupGrace       = 5 * time.Second
	DefaultMaxClockRegression = 2 * time.Second
	// DefaultLeaseTTL is a concurrency policy's lease_ttl when it sets
	// none.
	DefaultLeaseTTL = 30 * time.Second
	// DefaultReserve is what a response-charged policy reserves at
	// admission when it sets no reserve.
	DefaultReserve = 1
)

// MinPenalty and MaxPenalty bound a policy's Penalty: a second, as
// Retry-After counts, to a week.
const (
	MinPenalty = time.Second
	MaxPenalty = 7 * 24 * time.Hour
)

// MaxMaxDelay bounds MaxDelay: a request held longer would wait past
// every client's patience and every proxy's idle timeout in front.
const MaxMaxDelay = 10 * time.Second

// The bounds of LeaseTTL: renewal at a third of it must be far from the
// decision's own time, and a slot leaked by a dead gateway must come back
// within the hour.
const (
	MinLeaseTTL = time.Second
	MaxLeaseTTL = time.Hour
)

// HoldsLeases reports whether an admitted request holds leases of p until
// it is released: whether p counts requests in flight (concurrency).
func (p *Policy) HoldsLeases() bool { return p.Algorithm.spec().leases }

// Quota is the most a subject may spend at once: the window's limit or the
// bucket's capacity.
func (p *Policy) Quota() int64 { return p.Algorithm.spec().quota(p) }

// Period is the unit of time the algorithm counts in: the window, or the
// bucket's refill period.
func (p *Policy) Period() time.Duration { return p.Algorithm.spec().period(p) }

// Certainty is how exact the policy's decisions are.
func (p *Policy) Certainty() Certainty { return p.Algorithm.spec().certainty }

// QuotaWindow is the time over which Quota applies: the window, or the time a
// drained bucket takes to fill again.
func (p *Policy) QuotaWindow() time.Duration { return p.Algorithm.spec().quotaWindow(p) }

// decision is the Decision a backend reports from the numbers it keeps (a
// script's reply, a remembered evaluation): the limit and the certainty
// follow from the policy.
// nowMillis is when the caller read its clock, from which a calendar
// policy's period is found again.
func (p *Policy) decision(allowed bool, remaining int64, resetAfter, retryAfter time.Duration, nowMillis int64) Decision {
	return Decision{Allowed: allowed, Limit: p.Quota(), Remaining: remaining,
		ResetAfter: resetAfter, RetryAfter: retryAfter, Certainty: p.Certainty(),
		WindowSeconds: p.windowSeconds(nowMillis, resetAfter)}
}

// maxExactInLua: the scripts compute in doubles, exact up to 2^53.
const maxExactInLua = 1 << 53

// Validate reports every problem of p, each a *option.Error (joined). The
// fields are checked one by one first; only when each is fine are they
// checked against each other (max_cost against the quota, the quota
// against the headers), so that one mistake is reported once.
func (p *Policy) Validate() error {
	var errs []error
	problem := func(field, summary, detail string, args ...any) {
		errs = append(errs, &option.Error{Field: field, Summary: summary, Detail: fmt.Sprintf(detail, args...)})
	}
	// The detail names the attribute as its block writes it.
	atLeast := func(field string, v, min int64) {
		if v < min {
			problem(field, "Value too small", "%s must be at least %d.", strings.TrimPrefix(field, "dedup."), min)
		}
	}
	notBelow := func(field string, d, min time.Duration) {
		if d < min {
			problem(field, "Duration too short", "%s must be at least %s.", strings.TrimPrefix(field, "dedup."), min)
		}
	}
	// The scripts count time in whole milliseconds.
	millis := func(field string, d time.Duration) {
		notBelow(field, d, time.Millisecond)
		if d >= time.Millisecond && d%time.Millisecond != 0 {
			problem(field, "Duration below a millisecond", "%s must be a whole number of milliseconds.", field)
		}
	}
	if p.Name == "" {
		problem("name", "Invalid policy", "A policy needs a name.")
	}
	atLeast("revision", p.Revision, 1)
	if !slices.Contains(Algorithms(), p.Algorithm) {
		problem("algorithm", "Unknown algorithm", "algorithm %d is none of %v.", p.Algorithm, Algorithms())
		return p.joined(errs)
	}
	takes := p.Algorithm.takes()
	for _, f := range algorithmFields {
		if f.value(p) != 0 && !slices.Contains(takes, f.name) {
			errs = append(errs, p.Algorithm.NotTaken(f.name))
		}
	}
	calendar := p.Calendar != 0 && slices.Contains(takes, "calendar")
	for _, name := range takes {
		f := fieldNamed(name)
		switch d := time.Duration(f.value(p)); {
		case f.unset:
		case name == "window" && calendar:
			if p.Window != 0 {
				problem("window", "Argument not valid with calendar", "calendar replaces window: a policy sets one of them.")
			}
		case f.max != 0 && (d < f.min || d > f.max):
			problem(name, "Duration out of range", "%s must be between %s and %s.", name, f.min, f.max)
		case f.duration:
			millis(name, d)
		default:
			atLeast(name, f.value(p), 1)
		}
	}
	if calendar && p.Calendar.String() == "none" {
		problem("calendar", "Unknown calendar", "calendar %d is none of day, week or month.", p.Calendar)
	}
	if p.Timezone != (Timezone{}) {
		if p.Timezone.err != nil {
			problem("timezone", "Unknown time zone", "timezone must be an IANA time zone name such as \"Europe/Berlin\" (%v).", p.Timezone.err)
		} else if p.Calendar == 0 && slices.Contains(takes, "calendar") {
			problem("timezone", "timezone without calendar", "timezone applies only to a policy with a calendar.")
		}
	}
	if p.Lease < 0 {
		problem("lease", "Value too small", "lease must be at least 1.")
	}
	switch {
	case p.Penalty != 0 && (p.Penalty < MinPenalty || p.Penalty > MaxPenalty):
		problem("penalty", "Duration out of range", "penalty must be between %s and %s.", MinPenalty, MaxPenalty)
	case p.Penalty != 0 && p.Shadow:
		problem("penalty", "penalty on a shadow policy", "A shadow policy refuses nobody, so it puts nobody in the penalty box.")
	}
	atLeast("max_cost", p.MaxCost, 1)
	p.validateResponseCharge(problem)
	p.validateMaxDelay(problem, millis)
	notBelow("cleanup_grace", p.CleanupGrace, 0)
	notBelow("max_clock_regression", p.MaxClockRegression, 0)
	// A Dedup that is not the zero value (off) is checked even when it is
	// disabled: it is what enabling it would apply.
	if p.Dedup != (Dedup{}) {
		notBelow("dedup.ttl", p.Dedup.TTL, time.Millisecond)
		atLeast("dedup.max_entries", int64(p.Dedup.MaxEntries), 1)
		atLeast("dedup.max_bytes", int64(p.Dedup.MaxBytes), minDedupBytes)
	}
	if len(errs) > 0 {
		return p.joined(errs)
	}
	if p.MaxCost > p.Quota() {
		problem("max_cost", "max_cost above the quota", "max_cost is %d but the policy admits only %d at once.", p.MaxCost, p.Quota())
	}
	if p.ChargedByResponse() && p.Reserve > p.MaxCost {
		problem("reserve", "reserve above max_cost", "reserve is %d but no response is charged more than max_cost, %d.", p.Reserve, p.MaxCost)
	}
	// A window in seconds always fits: no duration reaches 16 digits of them.
	if p.Quota() > MaxHeaderInteger {
		problem("", "Policy too large for the headers", "RateLimit-Policy carries the quota and the window in seconds as Structured Field integers, at most 15 digits each.")
	}
	return p.joined(errs)
}

// Exact reports why a backend could not count p exactly, as a
// *option.Error, or nil: the scripts compute in doubles, exact up to 2^53,
// so the quota times the period in milliseconds must stay below 2^51. A
// policy past it still runs (the memory backend counts in integers, and
// tests use such policies as "no limit"); a configuration file may not
// hold one. p must be valid. A calendar window's arithmetic (the Go side
// finds the period; the script compares and subtracts) never multiplies
// the quota by the period, so only the quota must stay below 2^51: a
// plan of ten million a month is exact.
func (p *Policy) Exact() error {
	period := p.Period()
	if p.Calendar != 0 {
		period = time.Millisecond
	}
	if p.Quota() > maxExactInLua/max(period.Milliseconds(), 1)/4 {
		return p.joined([]error{&option.Error{Summary: "Policy too large",
			Detail: "The quota times the window in milliseconds must stay below 2^51 so every backend counts exactly."}})
	}
	return nil
}

// joined is errs as one error that names the policy; errors.As finds each
// *option.Error in it.
func (p *Policy) joined(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("policy %q: %w", p.Name, errors.Join(errs...))
}

// minDedupBytes is the least dedup.max_bytes: room for a few records.
const minDedupBytes = 128
