package limiter

import (
	"errors"
	"fmt"
	"time"
)

// Algorithm names one of the three counting schemes.
type Algorithm uint8

const (
	FixedWindow Algorithm = iota + 1
	SlidingCounter
	TokenBucket
)

func (a Algorithm) String() string {
	switch a {
	case FixedWindow:
		return "fixed-window"
	case SlidingCounter:
		return "sliding-counter"
	case TokenBucket:
		return "token-bucket"
	}
	return "unknown"
}

// ParseAlgorithm maps a configuration name to an Algorithm.
func ParseAlgorithm(s string) (Algorithm, bool) {
	for _, a := range []Algorithm{FixedWindow, SlidingCounter, TokenBucket} {
		if a.String() == s {
			return a, true
		}
	}
	return 0, false
}

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
// RefillPeriod for the token bucket. A Policy is immutable once built.
type Policy struct {
	Name      string
	Algorithm Algorithm
	Revision  int64

	Limit  int64
	Window time.Duration

	Capacity     int64
	RefillTokens int64
	RefillPeriod time.Duration

	// Shadow policies are decided and charged like enforced ones, but a
	// denial of theirs never refuses a request: the caller forwards it and
	// reports the would-be denial. In a request with several policies, a
	// shadow policy's denial does not stop the others from being charged.
	Shadow bool

	MaxCost            int64
	CleanupGrace       time.Duration
	MaxClockRegression time.Duration
	Clock              ClockSource
	Dedup              Dedup
}

// MaxHeaderInteger is the largest Structured Field integer (RFC 9651, 15
// digits): every quota must fit the RateLimit headers.
const MaxHeaderInteger = 999_999_999_999_999

// Defaults for the optional policy attributes.
const (
	DefaultCleanupGrace       = 5 * time.Second
	DefaultMaxClockRegression = 2 * time.Second
)

// Quota is the most a subject may spend at once: the window's limit or the
// bucket's capacity.
func (p *Policy) Quota() int64 {
	if p.Algorithm == TokenBucket {
		return p.Capacity
	}
	return p.Limit
}

// QuotaWindow is the time over which Quota applies: the window, or the time a
// drained bucket takes to fill again.
func (p *Policy) QuotaWindow() time.Duration {
	if p.Algorithm == TokenBucket {
		periods := (p.Capacity + p.RefillTokens - 1) / p.RefillTokens
		return time.Duration(periods) * p.RefillPeriod
	}
	return p.Window
}

// Validate reports the first inconsistency in p. Configuration decoding
// reports problems with source ranges; this is the backstop for policies
// built in code.
func (p *Policy) Validate() error {
	if p.Name == "" {
		return errors.New("policy has no name")
	}
	ms := func(d time.Duration) bool { return d >= time.Millisecond && d%time.Millisecond == 0 }
	switch p.Algorithm {
	case FixedWindow, SlidingCounter:
		if p.Limit < 1 {
			return fmt.Errorf("policy %q: limit must be at least 1", p.Name)
		}
		if !ms(p.Window) {
			return fmt.Errorf("policy %q: window must be a whole number of milliseconds, at least 1ms", p.Name)
		}
	case TokenBucket:
		if p.Capacity < 1 || p.RefillTokens < 1 {
			return fmt.Errorf("policy %q: capacity and refill_tokens must be at least 1", p.Name)
		}
		if !ms(p.RefillPeriod) {
			return fmt.Errorf("policy %q: refill_period must be a whole number of milliseconds, at least 1ms", p.Name)
		}
	default:
		return fmt.Errorf("policy %q: unknown algorithm", p.Name)
	}
	if p.Quota() > MaxHeaderInteger {
		return fmt.Errorf("policy %q: a quota of %d does not fit the RateLimit headers (15 digits at most)", p.Name, p.Quota())
	}
	if p.MaxCost < 1 || p.MaxCost > p.Quota() {
		return fmt.Errorf("policy %q: max_cost must be between 1 and the quota %d", p.Name, p.Quota())
	}
	if p.CleanupGrace < 0 || p.MaxClockRegression < 0 {
		return fmt.Errorf("policy %q: cleanup_grace and max_clock_regression must not be negative", p.Name)
	}
	if p.Dedup.Enabled && (p.Dedup.TTL < time.Millisecond || p.Dedup.MaxEntries < 1 || p.Dedup.MaxBytes < 1) {
		return fmt.Errorf("policy %q: dedup needs a positive ttl, max_entries and max_bytes", p.Name)
	}
	return nil
}
