package limiter

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/edgegate/gateway/internal/option"
)

// Algorithm names one of the counting schemes: three that count requests
// over time, and Concurrency, which counts the requests in flight.
type Algorithm uint8

const (
	FixedWindow Algorithm = iota + 1
	SlidingCounter
	TokenBucket
	// Concurrency admits a request while fewer than Limit leases of its
	// subject are held; an admitted request holds a lease (cost leases)
	// until the caller releases it, or until LeaseTTL passes without a
	// renewal (a gateway that died gives its leases back by expiry).
	Concurrency
)

func (a Algorithm) String() string { return a.spec().name }

// ParseAlgorithm maps a configuration name to an Algorithm; an unknown
// name is an *option.Error of the field algorithm.
func ParseAlgorithm(s string) (Algorithm, error) {
	var names []string
	for _, a := range Algorithms() {
		if a.String() == s {
			return a, nil
		}
		names = append(names, a.String())
	}
	return 0, option.Unknown("algorithm", "Unknown algorithm", s, names)
}

// Algorithms are every Algorithm there is, in the order the documentation
// lists them.
func Algorithms() []Algorithm {
	all := make([]Algorithm, 0, len(algorithms)-1)
	for a := range algorithms[1:] {
		all = append(all, Algorithm(a+1))
	}
	return all
}

// Fields are the fields the algorithm takes, and requires, by their
// configuration names.
func (a Algorithm) Fields() []string { return a.spec().fields }

// OptionalFields are the fields the algorithm takes that have a default
// (lease_ttl's is DefaultLeaseTTL; a fixed window's calendar is none, its
// timezone UTC; lease is off), by their configuration names.
func (a Algorithm) OptionalFields() []string { return a.spec().optional }

// Requires reports whether a policy of the algorithm must write field,
// given which fields it writes: every one of Fields, but window where
// calendar replaces it.
func (a Algorithm) Requires(field string, written func(field string) bool) bool {
	if !slices.Contains(a.Fields(), field) {
		return false
	}
	return field != "window" || !slices.Contains(a.OptionalFields(), "calendar") || !written("calendar")
}

// takes are the fields the algorithm takes, required or not.
func (a Algorithm) takes() []string { return slices.Concat(a.spec().fields, a.spec().optional) }

// Refuses are the fields other algorithms take that a does not: a policy
// of a that sets one is refused (NotTaken).
func (a Algorithm) Refuses() []string {
	takes := a.takes()
	var refused []string
	for _, other := range Algorithms() {
		for _, name := range other.takes() {
			if !slices.Contains(takes, name) && !slices.Contains(refused, name) {
				refused = append(refused, name)
			}
		}
	}
	return refused
}

// NotTaken is the problem of a policy of a that sets field, one of the
// fields a Refuses.
func (a Algorithm) NotTaken(field string) *option.Error {
	return &option.Error{Field: field, Summary: "Argument not valid for " + a.String(),
		Detail: fmt.Sprintf("%s does not apply to %s; it takes %s.", field, a, strings.Join(a.takes(), ", "))}
}

// algorithmField is one of the Policy fields that algorithms choose
// among, by its configuration name: an algorithm requires each it takes
// (at least 1, or a whole number of milliseconds, within [min, max]
// when those are set) and refuses the others. A field whose zero value
// is its default (unset) is checked by Validate's own rules for it.
type algorithmField struct {
	name     string
	value    func(*Policy) int64
	duration bool
	min, max time.Duration
	unset    bool
}

var algorithmFields = []algorithmField{
	{"limit", limit, false, 0, 0, false},
	{"window", func(p *Policy) int64 { return int64(p.Window) }, true, 0, 0, false},
	{"capacity", capacity, false, 0, 0, false},
	{"refill_tokens", func(p *Policy) int64 { return p.RefillTokens }, false, 0, 0, false},
	{"refill_period", func(p *Policy) int64 { return int64(p.RefillPeriod) }, true, 0, 0, false},
	{"lease_ttl", func(p *Policy) int64 { return int64(p.LeaseTTL) }, true, MinLeaseTTL, MaxLeaseTTL, false},
	{"calendar", func(p *Policy) int64 { return int64(p.Calendar) }, false, 0, 0, true},
	{"timezone", func(p *Policy) int64 {
		if p.Timezone != (Timezone{}) {
			return 1
		}
		return 0
	}, false, 0, 0, true},
	{"max_delay", func(p *Policy) int64 { return int64(p.MaxDelay) }, true, 0, 0, true},
	{"lease", func(p *Policy) int64 { return p.Lease }, false, 0, 0, true},
}

// fieldNamed is the algorithm field called name; the table of algorithms
// names only those.
func fieldNamed(name string) algorithmField {
	for _, f := range algorithmFields {
		if f.name == name {
			return f
		}
	}
	panic("limiter: an algorithm takes an unknown field " + name)
}

// algorithmSpec is what the Go side knows of one algorithm: its name in
// the configuration, its number in the script's ARGV (its Algorithm
// value; lua.Algorithms lists the same names in the same order), which of
// the policy's fields are its quota and period, how exact it is, and its
// arithmetic, the memory backend's twin of its Lua function.
//
// A new algorithm is: its Lua file in package lua and its name in that
// package's list; its Go file here, with its decide function; its
// Algorithm value and its entry in this table; and a row in
// algorithmFields for each Policy field it brings.
type algorithmSpec struct {
	name      string
	certainty Certainty
	// fields are the Policy fields it takes, and requires, by their
	// configuration names; optional are those it takes with a default.
	fields, optional []string
	// quota is the most a subject may spend at once; period is the unit of
	// time the algorithm counts in (ARGV's window or refill period).
	quota  func(*Policy) int64
	period func(*Policy) time.Duration
	// quotaWindow is the time over which the quota applies.
	quotaWindow func(*Policy) time.Duration
	// keepsPrev: the state's Prev field is the algorithm's (the memory
	// backend reads it from a second cache line only then).
	keepsPrev bool
	// leases: the state's Count is the leases held now, which the backend
	// counts from its live leases before deciding; a charge takes a lease
	// (cost leases) under the request's evaluation ID that lives for
	// LeaseTTL unless released or renewed. A shadow policy's lease is
	// taken even when it would have refused: the request is in flight.
	// Its denials are never remembered (denials): any release may end one.
	leases bool
	// decide charges cost when it fits, or with debt whatever is left, or
	// when it fits within maxDelayMillis (0 but for an algorithm that
	// takes max_delay), with that delay (see Policy.MaxDelay).
	decide func(p *Policy, st state, nowMillis, cost int64, debt bool, maxDelayMillis int64) step
	// giveBack takes back a charge of cost that decide made in the window
	// (or of the refill) starting at start (the state's Start it wrote),
	// when st still holds it; false: nothing to give back.
	giveBack func(p *Policy, st state, cost, start int64) (state, bool)
	// leaseLife, for the algorithms that take Lease, is how long a lease
	// of budget taken with an admission decided as d may be spent from:
	// until the end of the period d was counted in (budget_lease.go).
	leaseLife func(p *Policy, d Decision) time.Duration
	// reserveLife, for the algorithms a response may charge, is how long
	// a reserve stays held for a request in flight whose settlement never
	// comes: the window, or the refill of max_cost.
	reserveLife func(p *Policy) time.Duration
}

var algorithms = [...]algorithmSpec{
	FixedWindow: {name: "fixed-window", fields: windowFields, optional: []string{"calendar", "timezone", "max_delay", "lease"},
		quota: limit, period: window, quotaWindow: window, decide: decideFixedWindow, giveBack: giveBackFixedWindow,
		leaseLife: windowLeft, reserveLife: window},
	// The sliding counter weighs the previous window by the fraction that
	// still overlaps; it never keeps a log of requests, so its decisions
	// are estimates.
	SlidingCounter: {name: "sliding-counter", fields: windowFields, certainty: Approximate, quota: limit, period: window, quotaWindow: window,
		keepsPrev: true, decide: decideSlidingCounter, giveBack: giveBackSlidingCounter, reserveLife: window},
	TokenBucket: {name: "token-bucket", fields: []string{"capacity", "refill_tokens", "refill_period"}, optional: []string{"max_delay", "lease"},
		quota: capacity, period: refillPeriod, quotaWindow: bucketFill,
		decide: decideTokenBucket, giveBack: giveBackTokenBucket, leaseLife: untilRefill, reserveLife: maxCostRefill},
	Concurrency: {name: "concurrency", fields: []string{"limit"}, optional: []string{"lease_ttl"}, quota: limit, period: leaseTTL, quotaWindow: leaseTTL,
		leases: true, decide: decideConcurrency, giveBack: giveBackConcurrency},
}

var windowFields = []string{"limit", "window"}

func limit(p *Policy) int64 { return p.Limit }

// window is the policy's window; a calendar's is as long as its longest
// period.
func window(p *Policy) time.Duration {
	switch p.Calendar {
	case CalendarDay:
		return 25 * time.Hour
	case CalendarWeek:
		return 7*24*time.Hour + time.Hour
	case CalendarMonth:
		return 31*24*time.Hour + time.Hour
	}
	return p.Window
}

// unknownAlgorithm answers for an Algorithm value outside the table, so
// that a policy built in code with one fails Validate rather than panics.
var unknownAlgorithm = algorithmSpec{
	name: "unknown", quota: limit, period: window, quotaWindow: window,
	decide:   func(*Policy, state, int64, int64, bool, int64) step { return step{} },
	giveBack: func(*Policy, state, int64, int64) (state, bool) { return state{}, false },
}

func (a Algorithm) spec() *algorithmSpec {
	if a > 0 && int(a) < len(algorithms) {
		return &algorithms[a]
	}
	return &unknownAlgorithm
}

// state is what one key holds, in milliseconds. The fields mean, per algorithm:
//
//	fixed-window:    Start = window start, Count = spent in it
//	sliding-counter: Start = current window start, Count = spent in it,
//	                 Prev = spent in the window before
//	token-bucket:    Start = time of the last whole-period refill, Count = tokens
//	concurrency:     Count = leases held (counted from the live leases)
//
// Seen is the latest clock reading that wrote the state; it is what the clock
// regression bound is checked against. The Lua scripts keep the same fields
// under the same names and compute the same arithmetic: the conformance suite
// holds the two to one result.
type state struct {
	Valid bool
	Start int64
	Count int64
	Prev  int64
	Seen  int64
}

// step is the result of applying one request to a state.
type step struct {
	decision    Decision
	next        state // written only when charged
	charged     bool
	ttlMillis   int64 // how long the written state must live, from now
	clockUnsafe bool
}

// decide applies a request of the given cost at nowMillis to st, in the
// phase given (see Phase); mayDelay: its caller can hold it (see
// Request.MayDelay). A denial never changes state, but a shadow
// concurrency policy's takes its lease.
func decide(p *Policy, st state, nowMillis, cost int64, phase Phase, mayDelay bool) step {
	if st.Valid && st.Seen > nowMillis {
		if st.Seen-nowMillis > p.MaxClockRegression.Milliseconds() {
			return step{clockUnsafe: true}
		}
		// A reading behind the stored one, but within the bound: time never
		// runs backwards for a key, so the request is placed at the stored time.
		nowMillis = st.Seen
	}
	var res step
	switch {
	case phase == Settlement:
		res = p.Algorithm.spec().decide(p, st, nowMillis, cost, true, 0)
	case p.ChargedByResponse():
		// Its reserve, charged like any cost; the settlement does the rest.
		res = p.Algorithm.spec().decide(p, st, nowMillis, admissionCharge(p, cost), false, 0)
	default:
		res = p.Algorithm.spec().decide(p, st, nowMillis, cost, false, p.maxDelayMillis(mayDelay))
	}
	res.decision.Certainty = p.Certainty()
	return res
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
