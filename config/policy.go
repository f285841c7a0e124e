package config

import (
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/edgegate/gateway/limiter"
)

// maxExactInLua: the scripts compute in doubles, exact up to 2^53.
const maxExactInLua = 1 << 53

// policy checks one policy block. It returns nil when the block is too
// broken to use; its problems are already reported.
func (c *checker) policy(b *policyBlock) *limiter.Policy {
	before := len(c.diags)
	if b.Algorithm == nil {
		return nil
	}
	alg, ok := limiter.ParseAlgorithm(*b.Algorithm)
	if !ok {
		c.errorf(b.AlgorithmRange, "Unknown algorithm", "algorithm must be fixed-window, sliding-counter or token-bucket, not %q.", *b.Algorithm)
		return nil
	}
	// Which attributes each algorithm takes; it requires all of them.
	type shapeAttr struct {
		name    string
		present bool
		nameRng hcl.Range
	}
	window := []shapeAttr{{"limit", b.LimitName != hcl.Range{}, b.LimitName}, {"window", b.WindowName != hcl.Range{}, b.WindowName}}
	bucket := []shapeAttr{
		{"capacity", b.CapacityName != hcl.Range{}, b.CapacityName},
		{"refill_tokens", b.RefillTokensName != hcl.Range{}, b.RefillTokensName},
		{"refill_period", b.RefillPeriodName != hcl.Range{}, b.RefillPeriodName},
	}
	takes, other := window, bucket
	if alg == limiter.TokenBucket {
		takes, other = bucket, window
	}
	var names []string
	for _, a := range takes {
		names = append(names, a.name)
	}
	for _, o := range other {
		if o.present {
			c.errorf(o.nameRng, "Argument not valid for "+alg.String(), "%s does not apply to %s; it takes %s.", o.name, alg, strings.Join(names, ", "))
		}
	}
	for _, a := range takes {
		if !a.present {
			c.errorf(b.DefRange, "Missing required argument", "A %s policy needs %s.", alg, a.name)
		}
	}
	p := &limiter.Policy{
		Name:               b.Name,
		Algorithm:          alg,
		Revision:           c.integer(b.Revision, b.RevisionRange, "revision", 1, 1),
		Limit:              c.integer(b.Limit, b.LimitRange, "limit", 0, 1),
		Window:             c.duration(b.Window, b.WindowRange, "window", 0, time.Millisecond),
		Capacity:           c.integer(b.Capacity, b.CapacityRange, "capacity", 0, 1),
		RefillTokens:       c.integer(b.RefillTokens, b.RefillTokensRange, "refill_tokens", 0, 1),
		RefillPeriod:       c.duration(b.RefillPeriod, b.RefillPeriodRange, "refill_period", 0, time.Millisecond),
		MaxCost:            c.integer(b.MaxCost, b.MaxCostRange, "max_cost", 1, 1),
		CleanupGrace:       c.duration(b.CleanupGrace, b.CleanupGraceRange, "cleanup_grace", limiter.DefaultCleanupGrace, 0),
		MaxClockRegression: c.duration(b.MaxClockRegression, b.MaxClockRegressionRange, "max_clock_regression", limiter.DefaultMaxClockRegression, 0),
		Dedup:              limiter.DefaultDedup,
	}
	for _, d := range []struct {
		name  string
		value time.Duration
		rng   hcl.Range
	}{{"window", p.Window, b.WindowRange}, {"refill_period", p.RefillPeriod, b.RefillPeriodRange}} {
		if d.value%time.Millisecond != 0 {
			c.errorf(d.rng, "Duration below a millisecond", "%s must be a whole number of milliseconds.", d.name)
		}
	}
	switch clock := or(b.Clock, "redis"); clock {
	case "redis":
		p.Clock = limiter.ClockBackend
	case "gateway":
		p.Clock = limiter.ClockGateway
	default:
		c.errorf(b.ClockRange, "Unknown clock", "clock must be \"redis\" or \"gateway\", not %q.", clock)
	}
	switch mode := or(b.Mode, "enforce"); mode {
	case "enforce":
	case "shadow":
		p.Shadow = true
	default:
		c.errorf(b.ModeRange, "Unknown mode", "mode must be \"enforce\" or \"shadow\", not %q.", mode)
	}
	if db := b.Dedup; db != nil {
		p.Dedup = limiter.Dedup{
			Enabled:    or(db.Enabled, true),
			TTL:        c.duration(db.TTL, db.TTLRange, "ttl", p.Dedup.TTL, time.Millisecond),
			MaxEntries: int(c.integer(db.MaxEntries, db.MaxEntriesRange, "max_entries", int64(p.Dedup.MaxEntries), 1)),
			MaxBytes:   int(c.integer(db.MaxBytes, db.MaxBytesRange, "max_bytes", int64(p.Dedup.MaxBytes), 128)),
		}
	}
	if c.diags[before:].HasErrors() {
		return nil
	}
	for _, rng := range []hcl.Range{b.LimitRange, b.WindowRange, b.CapacityRange, b.RefillTokensRange, b.RefillPeriodRange,
		b.RevisionRange, b.MaxCostRange, b.CleanupGraceRange, b.MaxClockRegressionRange, b.ClockRange, b.ModeRange} {
		if c.decodeFailed(rng) {
			return nil // reported by gohcl; the rest would only follow from it
		}
	}
	if b.MaxCost != nil && p.MaxCost > p.Quota() {
		c.errorf(b.MaxCostRange, "max_cost above the quota", "max_cost is %d but the policy admits only %d at once.", p.MaxCost, p.Quota())
	}
	period := p.Window
	if alg == limiter.TokenBucket {
		period = p.RefillPeriod
	}
	// A window in seconds always fits: no duration reaches 16 digits of them.
	if p.Quota() > limiter.MaxHeaderInteger {
		c.errorf(b.DefRange, "Policy too large for the headers", "RateLimit-Policy carries the quota and the window in seconds as Structured Field integers, at most 15 digits each.")
	}
	if p.Quota() > maxExactInLua/max(period.Milliseconds(), 1)/4 {
		c.errorf(b.DefRange, "Policy too large", "The quota times the window in milliseconds must stay below 2^51 so every backend counts exactly.")
	}
	// The limiter's own check is the last word; anything it refuses that
	// the checks above let through is reported on the block.
	if err := p.Validate(); err != nil && !c.diags[before:].HasErrors() {
		c.errorf(b.DefRange, "Invalid policy", "%s.", err)
	}
	return p
}
