package limiter

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgegate/gateway/internal/option"
)

// BreakerOptions configure the circuit breaker each Redis node gets. After
// Failures consecutive calls to a node that end Unavailable or
// Indeterminate, calls to it fail at once as Unavailable(circuit_open) for
// Cooldown, so that no request waits out its deadline on a node known to be
// failing; then one call at a time probes it, and a success closes the
// breaker. A probe waits for the node at most BreakerProbeTimeout (or its
// caller's deadline, if sooner): one sent into a link that swallows
// everything costs no more than that before the next probe's cooldown
// starts. So once a node answers again, calls to it resume within
// Cooldown + BreakerProbeTimeout. Zero values take the defaults: 5
// failures, 1s; others are at least 1 and MinBreakerCooldown.
type BreakerOptions struct {
	Disabled bool
	Failures int
	Cooldown time.Duration
}

// Defaults of BreakerOptions.
const (
	DefaultBreakerFailures = 5
	DefaultBreakerCooldown = time.Second
)

// BreakerProbeTimeout bounds the wait of a breaker's probe (see
// BreakerOptions): a node that answers takes well under it.
const BreakerProbeTimeout = 250 * time.Millisecond

// MinBreakerCooldown is the least BreakerOptions.Cooldown may be when set.
const MinBreakerCooldown = time.Millisecond

// Validate reports a Failures below 1 or a Cooldown below
// MinBreakerCooldown, each a *option.Error naming the field as a breaker
// block does ("failures", "cooldown"), joined. A zero takes the default.
// NewRedis refuses what it reports.
func (o BreakerOptions) Validate() error {
	var errs []error
	if o.Failures < 0 {
		errs = append(errs, &option.Error{Field: "failures", Summary: "Value too small", Detail: "failures must be at least 1."})
	}
	if o.Cooldown != 0 && o.Cooldown < MinBreakerCooldown {
		errs = append(errs, &option.Error{Field: "cooldown", Summary: "Duration too short", Detail: fmt.Sprintf("cooldown must be at least %s.", MinBreakerCooldown)})
	}
	return errors.Join(errs...)
}

type breakerState uint8

const (
	breakerClosed breakerState = iota
	breakerOpen
	breakerHalfOpen // one probe in flight or allowed
)

// breaker is one node's circuit breaker. Its methods are safe for
// concurrent use.
type breaker struct {
	node     string
	failures int
	cooldown time.Duration
	gauge    prometheus.Gauge
	logger   *slog.Logger

	mu          sync.Mutex
	state       breakerState
	consecutive int
	openedAt    time.Time
	probing     bool
	// opens counts the times the breaker opened: a connection dialed
	// before the last, or while it was open, is not used again (see
	// markedConn and dialMark).
	opens atomic.Uint64
	// quiet is state == breakerClosed && consecutive == 0, kept under mu
	// and read without it (see calm).
	quiet atomic.Bool
}

func newBreaker(node string, opts BreakerOptions, gauge prometheus.Gauge, logger *slog.Logger) *breaker {
	if opts.Failures <= 0 {
		opts.Failures = DefaultBreakerFailures
	}
	if opts.Cooldown <= 0 {
		opts.Cooldown = DefaultBreakerCooldown
	}
	b := &breaker{node: node, failures: opts.Failures, cooldown: opts.Cooldown, gauge: gauge, logger: logger}
	b.quiet.Store(true)
	return b
}

// calm reports, without the lock, that the breaker is closed and has
// counted no failure: allow would let any call through, and a success
// would change nothing, so a caller that finds it calm skips both, and
// the clock read they take.
func (b *breaker) calm() bool { return b.quiet.Load() }

// allow reports whether a call may go to the node now, and whether it
// is the probe. When the cooldown has passed it lets exactly one call
// through as the probe.
func (b *breaker) allow(now time.Time) (ok, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case breakerOpen:
		if now.Sub(b.openedAt) < b.cooldown {
			return false, false
		}
		b.state, b.probing = breakerHalfOpen, true
		return true, true
	case breakerHalfOpen:
		if b.probing {
			return false, false
		}
		b.probing = true
		return true, true
	}
	return true, false
}

// record counts the end of a call that allow let through: ok when the node
// answered it.
func (b *breaker) record(ok bool, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer func() { b.quiet.Store(b.state == breakerClosed && b.consecutive == 0) }()
	switch b.state {
	case breakerClosed:
		if ok {
			b.consecutive = 0
			return
		}
		b.consecutive++
		if b.consecutive >= b.failures {
			b.open(now, "consecutive failures")
		}
	case breakerHalfOpen:
		b.probing = false
		if !ok {
			b.open(now, "the probe failed")
			return
		}
		b.state, b.consecutive = breakerClosed, 0
		b.gauge.Set(0)
		b.logger.Info("redis circuit breaker closed", "node", b.node)
	case breakerOpen:
		// A call that was under way when the breaker opened: it changes
		// nothing until the cooldown ends.
	}
}

// abandon ends a call that allow let through without a verdict on the
// node; a probe's place goes to the next call.
func (b *breaker) abandon() {
	b.mu.Lock()
	if b.state == breakerHalfOpen {
		b.probing = false
	}
	b.mu.Unlock()
}

// dialMark is the mark of a connection whose dial begins now: the times
// the breaker opened, less one while it is open. A connection dialed
// during the cooldown, perhaps into the fault, is thus stale at once, as
// if dialed before the breaker opened.
func (b *breaker) dialMark() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == breakerOpen {
		return b.opens.Load() - 1
	}
	return b.opens.Load()
}

func (b *breaker) open(now time.Time, why string) {
	b.state, b.openedAt = breakerOpen, now
	b.opens.Add(1)
	b.gauge.Set(1)
	b.logger.Warn("redis circuit breaker open", "node", b.node, "reason", why, "cooldown", b.cooldown.String())
}
