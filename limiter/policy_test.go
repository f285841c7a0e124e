package limiter_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/edgegate/gateway/internal/option"
	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/lua"
)

// A policy built in code is held to what the headers can carry, as one
// from the file is.
func TestAQuotaTheHeadersCannotCarryIsRefused(t *testing.T) {
	p := &limiter.Policy{Name: "p", Algorithm: limiter.FixedWindow, Revision: 1, Limit: limiter.MaxHeaderInteger, Window: time.Hour, MaxCost: 1}
	if err := p.Validate(); err != nil {
		t.Fatalf("15 digits: %v", err)
	}
	p.Limit++
	if err := p.Validate(); err == nil {
		t.Fatal("a 16-digit quota was accepted")
	}
}

// The scripts' exact range is the limiter's rule too: the quota times the
// period in milliseconds stays below 2^51.
func TestExactReportsAPolicyTheScriptsCannotCountExactly(t *testing.T) {
	p := &limiter.Policy{Name: "p", Algorithm: limiter.FixedWindow, Revision: 1, Limit: 1 << 31, Window: 1 << 20 * time.Millisecond, MaxCost: 1}
	if err := p.Exact(); err != nil {
		t.Fatalf("2^51 exactly: %v", err)
	}
	p.Limit++
	var fe *option.Error
	if err := p.Exact(); !errors.As(err, &fe) || fe.Summary != "Policy too large" {
		t.Fatalf("2^51 + 2^20 was not reported as too large: %v", err)
	}
}

// A calendar quota is counted without multiplying it by its period: a
// monthly plan far past what a 31-day window of the same quota allows is
// exact.
func TestExactTakesACalendarQuotaOfTenMillionAMonth(t *testing.T) {
	p := &limiter.Policy{Name: "p", Algorithm: limiter.FixedWindow, Revision: 1, Limit: 10_000_000, Calendar: limiter.CalendarMonth,
		Timezone: limiter.LoadTimezone("Europe/Berlin"), MaxCost: 1}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := p.Exact(); err != nil {
		t.Fatalf("ten million a month: %v", err)
	}
	p.Limit = 1<<51 + 1
	if err := p.Exact(); err == nil {
		t.Fatal("2^51 + 1 a month was taken as exact")
	}
}

// Every problem is reported, each naming its field, so that configuration
// can point at it.
func TestValidateNamesEachFieldAtFault(t *testing.T) {
	p := &limiter.Policy{Name: "p", Algorithm: limiter.TokenBucket, Revision: 0, Capacity: 5, RefillTokens: 0, RefillPeriod: time.Second + time.Microsecond,
		MaxCost: 1, Dedup: limiter.Dedup{Enabled: true, TTL: time.Second, MaxEntries: 1, MaxBytes: 64}}
	var fields []string
	for _, e := range joined(p.Validate()) {
		var fe *option.Error
		if errors.As(e, &fe) {
			fields = append(fields, fe.Field)
		}
	}
	want := []string{"revision", "refill_tokens", "refill_period", "dedup.max_bytes"}
	if !slices.Equal(fields, want) {
		t.Fatalf("fields %q, want %q", fields, want)
	}
}

func joined(err error) []error {
	for err != nil {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			return j.Unwrap()
		}
		err = errors.Unwrap(err)
	}
	return nil
}

// The script picks an algorithm's function by the number the Go side
// sends: the two number them alike.
func TestTheScriptNumbersTheAlgorithmsAsTheGoSideDoes(t *testing.T) {
	names := lua.Algorithms()
	for i, name := range names {
		a, err := limiter.ParseAlgorithm(name)
		if err != nil || a != limiter.Algorithm(i+1) {
			t.Errorf("the script's algorithm %d is %q, which the Go side numbers %d", i+1, name, a)
		}
	}
	if a := limiter.Algorithm(len(names) + 1); a.String() != "unknown" {
		t.Errorf("the Go side knows algorithm %d (%s), which the script does not", a, a)
	}
}

// Every field an algorithm takes is one Validate knows how to check.
func TestEveryAlgorithmsFieldsAreChecked(t *testing.T) {
	for _, a := range limiter.Algorithms() {
		p := &limiter.Policy{Name: "p", Algorithm: a, Revision: 1, MaxCost: 1}
		var fields []string
		for _, e := range joined(p.Validate()) {
			var fe *option.Error
			if errors.As(e, &fe) {
				fields = append(fields, fe.Field)
			}
		}
		// An optional field has its default in the configuration, not
		// here: a Policy built without it is checked for it too. A fixed
		// window's calendar and timezone, max_delay and lease are the
		// exceptions: their zero values are their defaults (no calendar,
		// UTC, no delay, no lease).
		takes := slices.DeleteFunc(slices.Concat(a.Fields(), a.OptionalFields()), func(f string) bool {
			return f == "calendar" || f == "timezone" || f == "max_delay" || f == "lease"
		})
		if !slices.Equal(fields, takes) {
			t.Errorf("%s with none of its fields: problems with %q, want %q", a, fields, takes)
		}
	}
}

// count_statuses and cost_header are checked like every other field, each
// problem naming its own.
func TestValidateChecksWhatAResponseChargesBy(t *testing.T) {
	valid := func() *limiter.Policy {
		return &limiter.Policy{Name: "p", Algorithm: limiter.FixedWindow, Revision: 1, Limit: 5, Window: time.Minute, MaxCost: 5, Reserve: 1}
	}
	for _, c := range []struct {
		name  string
		edit  func(*limiter.Policy)
		field string // "" when valid
	}{
		{"a list of error statuses is valid", func(p *limiter.Policy) { p.CountStatuses = limiter.StatusSet(401, 403) }, ""},
		{"a header name is valid", func(p *limiter.Policy) { p.CostHeader = "X-Usage-Cost" }, ""},
		{"an informational status is refused", func(p *limiter.Policy) { p.CountStatuses = limiter.StatusSet(401, 101) }, "count_statuses"},
		{"a status above 599 is refused", func(p *limiter.Policy) { p.CountStatuses = limiter.StatusSet(600) }, "count_statuses"},
		{"a status past any set is refused", func(p *limiter.Policy) { p.CountStatuses = limiter.StatusSet(100000) }, "count_statuses"},
		{"a header name with a space is refused", func(p *limiter.Policy) { p.CostHeader = "X Cost" }, "cost_header"},
		{"a cost header whose max_cost is 1 is refused", func(p *limiter.Policy) { p.CostHeader, p.MaxCost = "X-Usage-Cost", 1 }, "cost_header"},
		{"a reserve of max_cost is valid", func(p *limiter.Policy) { p.CostHeader, p.Reserve = "X-Usage-Cost", 5 }, ""},
		{"a reserve of 0 is refused", func(p *limiter.Policy) { p.CountStatuses, p.Reserve = limiter.StatusSet(401), 0 }, "reserve"},
		{"a reserve above max_cost is refused", func(p *limiter.Policy) { p.CostHeader, p.Reserve = "X-Usage-Cost", 6 }, "reserve"},
		{"both ways at once are refused", func(p *limiter.Policy) {
			p.CountStatuses, p.CostHeader = limiter.StatusSet(401), "X-Cost"
		}, "cost_header"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := valid()
			c.edit(p)
			err := p.Validate()
			var fe *option.Error
			switch {
			case c.field == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field):
				t.Fatalf("got %v, want a problem with %s", err, c.field)
			}
			if !p.ChargedByResponse() {
				t.Fatal("not charged by the response")
			}
		})
	}
}

// NewPolicy sets every default: once the algorithm's own fields are set,
// the policy is valid, revision and max_cost are 1, and only a policy
// that holds leases gets a lease TTL.
func TestNewPolicySetsTheDefaults(t *testing.T) {
	for _, alg := range limiter.Algorithms() {
		p := limiter.NewPolicy("p", alg)
		p.Limit, p.Capacity, p.RefillTokens = 5, 5, 1
		for _, f := range alg.Fields() {
			switch f {
			case "window":
				p.Window = time.Second
			case "refill_period":
				p.RefillPeriod = time.Second
			}
		}
		if !slices.Contains(alg.Fields(), "limit") {
			p.Limit = 0
		}
		if !slices.Contains(alg.Fields(), "capacity") {
			p.Capacity, p.RefillTokens = 0, 0
		}
		if err := p.Validate(); err != nil {
			t.Errorf("%s: %v", alg, err)
		}
		if p.Revision != 1 || p.MaxCost != 1 || p.Dedup != limiter.DefaultDedup || p.Shadow {
			t.Errorf("%s: revision %d, max_cost %d, dedup %+v, shadow %v", alg, p.Revision, p.MaxCost, p.Dedup, p.Shadow)
		}
		want := time.Duration(0)
		if p.HoldsLeases() {
			want = limiter.DefaultLeaseTTL
		}
		if p.LeaseTTL != want {
			t.Errorf("%s: lease TTL %s, want %s", alg, p.LeaseTTL, want)
		}
	}
}

// max_delay is a token bucket's and a fixed window's, at most 10s, in
// whole milliseconds, and never on a policy charged by the response.
func TestValidateChecksMaxDelay(t *testing.T) {
	for _, c := range []struct {
		name  string
		p     limiter.Policy
		field string // "" when valid
	}{
		{"a token bucket takes it", limiter.Policy{Algorithm: limiter.TokenBucket, Capacity: 10, RefillTokens: 10, RefillPeriod: time.Second, MaxDelay: 500 * time.Millisecond}, ""},
		{"a fixed window takes it", limiter.Policy{Algorithm: limiter.FixedWindow, Limit: 10, Window: time.Second, MaxDelay: 10 * time.Second}, ""},
		{"a sliding counter does not", limiter.Policy{Algorithm: limiter.SlidingCounter, Limit: 10, Window: time.Second, MaxDelay: time.Second}, "max_delay"},
		{"concurrency does not", limiter.Policy{Algorithm: limiter.Concurrency, Limit: 10, LeaseTTL: time.Minute, MaxDelay: time.Second}, "max_delay"},
		{"past 10s is refused", limiter.Policy{Algorithm: limiter.FixedWindow, Limit: 10, Window: time.Second, MaxDelay: 10*time.Second + time.Millisecond}, "max_delay"},
		{"a negative one is refused", limiter.Policy{Algorithm: limiter.FixedWindow, Limit: 10, Window: time.Second, MaxDelay: -time.Second}, "max_delay"},
		{"below a millisecond is refused", limiter.Policy{Algorithm: limiter.FixedWindow, Limit: 10, Window: time.Second, MaxDelay: time.Second + time.Microsecond}, "max_delay"},
		{"a charge by the response is refused", limiter.Policy{Algorithm: limiter.FixedWindow, Limit: 10, Window: time.Second, MaxDelay: time.Second,
			CountStatuses: limiter.StatusSet(401)}, "max_delay"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := c.p
			p.Name, p.Revision, p.MaxCost, p.Reserve = "p", 1, 1, 1
			var fields []string
			for _, e := range joined(p.Validate()) {
				var fe *option.Error
				if errors.As(e, &fe) {
					fields = append(fields, fe.Field)
				}
			}
			if want := []string{c.field}; c.field == "" && fields != nil || c.field != "" && !slices.Equal(fields, want) {
				t.Fatalf("problems with %q, want %q", fields, c.field)
			}
		})
	}
}
