package limiter

// The Go side of the rate-limit script's arguments that a policy fixes:
// what each policy of a PolicySet passes, encoded once when the set is
// compiled (lua/args.go lays them out). The Redis backend appends them to
// a call with what the call itself asks (redis_script.go).

import (
	"strconv"
	"sync/atomic"

	"github.com/edgegate/gateway/lua"
)

// scriptPolicy is what every call of one policy shares, made once with
// its PolicySet: the end of its keys and its script arguments, boxed once.
type scriptPolicy struct {
	policy   *Policy
	keyTail  string // "}:" + name + ":" + revision
	args     [lua.ArgsPerPolicy]any
	dedupTTL any // ARGV 3, when it is a request's first policy
	places   any // ARGV 4, when it is a request's only policy, remembered
	// calendar is a calendar policy's window argument, made again when
	// the gateway's clock leaves the period it was made in.
	calendar *atomic.Pointer[calendarBounds]
}

// chargeMode is how one policy of one call in phase is charged.
func chargeMode(p *Policy, phase Phase) lua.Charge {
	switch {
	case phase == Settlement:
		return lua.ChargeDebt
	case phase == givingBack:
		return lua.ChargeReserved
	case phase == returningLease:
		return lua.ChargeReturned
	case p.ChargedByResponse():
		return lua.ChargeReserve
	}
	return lua.ChargeFits
}

func newScriptPolicy(p *Policy) scriptPolicy {
	c := scriptPolicy{policy: p, keyTail: "}:" + p.Name + ":" + strconv.FormatInt(p.Revision, 10)}
	shadow := 0
	if p.Shadow {
		shadow = 1
	}
	c.args = [lua.ArgsPerPolicy]any{
		lua.ArgAlgorithm: int(p.Algorithm), lua.ArgNow: "", lua.ArgLimit: p.Quota(),
		lua.ArgWindow: p.Period().Milliseconds(), lua.ArgRefill: p.RefillTokens,
		lua.ArgCleanupGrace: p.CleanupGrace.Milliseconds(), lua.ArgMaxClockRegression: p.MaxClockRegression.Milliseconds(),
		lua.ArgShadow: shadow, lua.ArgCharge: int(chargeMode(p, Admission)),
		lua.ArgMaxDelay: p.MaxDelay.Milliseconds(), lua.ArgLease: 0, lua.ArgReserve: p.Reserve,
	}
	c.dedupTTL = p.Dedup.TTL.Milliseconds()
	c.places = rememberedPlaces(p.Dedup, 1)
	if p.Calendar != 0 {
		c.calendar = new(atomic.Pointer[calendarBounds])
	}
	return c
}

// rememberedPlaces is how many evaluations a key of the first of n
// policies remembers (its ring's places): d.MaxEntries, fewer when
// d.MaxBytes holds fewer records (recordBytes each), and never none: a
// max_bytes the policy accepts (minDedupBytes) keeps at least one.
func rememberedPlaces(d Dedup, n int) int {
	return max(1, min(d.MaxEntries, d.MaxBytes/recordBytes(n)))
}

// recordBytes is what one remembered evaluation of a request of n
// policies is counted as against dedup.max_bytes: an evaluation ID of up
// to 48 bytes, its expiry, 32 bytes of numbers for each policy and 64 of
// the hash's bookkeeping (-bench RedisMemoryPerSubject measures about 65
// bytes a record with one policy, once the hash is there).
func recordBytes(n int) int { return 48 + 16 + 32*n + 64 }

// returningLease is the phase of a lease of budget's unused units given
// back (budget_lease.go), the cost. It is never asked of Evaluate.
const returningLease = givingBack + 1

// calendarArg is a calendar policy's window argument: the period
// boundaries around nowMillis (calendarBounds), from which the script
// picks the period that holds its own now. With clock = "redis" only the
// script knows now, and Lua has no time zone data to find a local
// midnight with; the gateway's clock is within seconds of Redis's, so the
// periods on either side of the gateway's hold Redis's now. The list is
// made once a period, not once a request.
func (c *scriptPolicy) calendarArg(nowMillis int64) any {
	b := c.calendar.Load()
	if b == nil || nowMillis < b.from || nowMillis >= b.until {
		b = c.policy.Calendar.bounds(c.policy.Timezone, nowMillis)
		c.calendar.Store(b)
	}
	return b.arg
}
