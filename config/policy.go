package config

import (
	"github.com/hashicorp/hcl/v2"

	"github.com/edgegate/gateway/limiter"
)

// policy reads one policy block; limiter.Policy.Validate checks it. It
// returns nil when the block is too broken to use; its problems are
// already reported.
func (c *checker) policy(b *policyBlock) *limiter.Policy {
	if b.Algorithm == nil {
		return nil
	}
	alg, err := limiter.ParseAlgorithm(*b.Algorithm)
	if err != nil {
		c.refusedAt(valueRange(b.Body, "algorithm"), err)
		return nil
	}
	// Which attributes the algorithm takes is the limiter's to say; that
	// the file writes them, or one another algorithm takes, is the file's.
	required := alg.Fields()
	for _, name := range alg.Refuses() {
		if has(b.Body, name) {
			c.refusedAt(nameRange(b.Body, name), alg.NotTaken(name))
		}
	}
	for _, name := range required {
		if !has(b.Body, name) && alg.Requires(name, func(f string) bool { return has(b.Body, f) }) {
			c.errorf(b.DefRange, "Missing required argument", "A %s policy needs %s.", alg, name)
		}
	}
	// Each attribute the file leaves out keeps the limiter's default.
	p := limiter.NewPolicy(b.Name, alg)
	p.Revision = or(b.Revision, p.Revision)
	p.Limit = or(b.Limit, 0)
	p.Window = c.durationOr(b.Window, b.Body, "window", 0)
	p.Capacity = or(b.Capacity, 0)
	p.RefillTokens = or(b.RefillTokens, 0)
	p.RefillPeriod = c.durationOr(b.RefillPeriod, b.Body, "refill_period", 0)
	p.LeaseTTL = c.durationOr(b.LeaseTTL, b.Body, "lease_ttl", p.LeaseTTL)
	p.MaxDelay = c.durationOr(b.MaxDelay, b.Body, "max_delay", p.MaxDelay)
	p.Lease = or(b.Lease, p.Lease)
	p.Penalty = c.durationOr(b.Penalty, b.Body, "penalty", 0)
	p.MaxCost = or(b.MaxCost, p.MaxCost)
	p.CleanupGrace = c.durationOr(b.CleanupGrace, b.Body, "cleanup_grace", p.CleanupGrace)
	p.MaxClockRegression = c.durationOr(b.MaxClockRegression, b.Body, "max_clock_regression", p.MaxClockRegression)
	p.CountStatuses = limiter.StatusSet(b.CountStatuses...)
	p.CostHeader = or(b.CostHeader, "")
	p.Reserve = or(b.Reserve, p.Reserve)
	if b.Reserve != nil && !p.ChargedByResponse() {
		c.refusedAt(nameRange(b.Body, "reserve"), limiter.ReserveNotTaken())
	}
	if b.Calendar != nil {
		cal, err := limiter.ParseCalendar(*b.Calendar)
		if err != nil {
			c.refusedAt(valueRange(b.Body, "calendar"), err)
			return nil
		}
		p.Calendar = cal
	}
	if b.Timezone != nil {
		p.Timezone = limiter.LoadTimezone(*b.Timezone)
	}
	if b.Clock != nil {
		if p.Clock, err = limiter.ParseClock(*b.Clock); err != nil {
			c.refusedAt(valueRange(b.Body, "clock"), err)
		}
	}
	if b.Mode != nil {
		if p.Shadow, err = limiter.ParseMode(*b.Mode); err != nil {
			c.refusedAt(valueRange(b.Body, "mode"), err)
		}
	}
	blocks := map[string]hcl.Body{"": b.Body}
	if db := b.Dedup; db != nil {
		blocks["dedup"] = db.Body
		p.Dedup = limiter.Dedup{
			Enabled:    or(db.Enabled, p.Dedup.Enabled),
			TTL:        c.durationOr(db.TTL, db.Body, "ttl", p.Dedup.TTL),
			MaxEntries: int(or(db.MaxEntries, int64(p.Dedup.MaxEntries))),
			MaxBytes:   int(or(db.MaxBytes, int64(p.Dedup.MaxBytes))),
		}
	}
	err = p.Validate()
	if err == nil {
		err = p.Exact()
	}
	c.fields(err, "Invalid policy", b.DefRange, finderOf(blocks, nil, nil))
	if err != nil || c.reportedAt(blockRange(b.DefRange, b.Body)) {
		return nil
	}
	return p
}
