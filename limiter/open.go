package limiter

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/edgegate/gateway/internal/option"
)

// Kind says where counters live.
type Kind uint8

const (
	// KindMemory keeps counters in the process: one gateway instance.
	KindMemory Kind = iota
	// KindRedis keeps counters in Redis, shared by every instance.
	KindRedis
)

func (k Kind) String() string {
	if k == KindRedis {
		return "redis"
	}
	return "memory"
}

// ParseKind maps a configuration name to a Kind; an unknown name is an
// *option.Error of the field backend.
func ParseKind(s string) (Kind, error) {
	for _, k := range []Kind{KindMemory, KindRedis} {
		if k.String() == s {
			return k, nil
		}
	}
	return 0, option.Unknown("backend", "Unknown limiter backend", s, []string{KindMemory.String(), KindRedis.String()})
}

// Options choose and configure a backend. The zero value is the memory
// backend with its defaults.
type Options struct {
	Kind   Kind
	Memory MemoryOptions
	Redis  RedisOptions // used when Kind is KindRedis
	// Fallback decides locally while Redis cannot; off unless Instances > 0.
	Fallback FallbackOptions
	// Registerer receives the backend's metrics, and those of the
	// admissions made for a route (Request.Route); nil registers none.
	Registerer prometheus.Registerer
	// Logger receives the Redis client's own messages (pool and dial
	// trouble, about servers, never clients); nil leaves go-redis's default.
	Logger *slog.Logger
}

// Backend is a ready limiter that the gateway owns for its whole life: it
// outlives configuration reloads, so counters survive them. What follows
// one admission (a release, a renewal, a give-back) is the admission's
// own (Evaluated.Admitted), not the backend's.
type Backend interface {
	Evaluate(ctx context.Context, req Request) Outcome
	// StandingDenial reports a denial of req that the backend can tell
	// now without charging anything and without a round trip; false
	// means only Evaluate can tell.
	StandingDenial(req Request) (Evaluated, bool)
	// Peek reports the state of req's policies for its subject without
	// charging anything (see inspect.go); Reset forgets it, on every
	// instance that shares the backend.
	Peek(ctx context.Context, req Request) Outcome
	Reset(ctx context.Context, req Request) error
	// Overrides keeps the overrides of subjects' limits (override.go).
	Overrides() Overrides
	// Penalties keeps the penalties of subjects (penalty.go).
	Penalties() Penalties
	// Ready reports why the backend cannot decide now, or nil; /readyz
	// serves it.
	Ready(ctx context.Context) error
	Close() error
}

// Open builds the backend opts describe and returns it ready to decide.
func Open(ctx context.Context, opts Options) (Backend, error) {
	switch opts.Kind {
	case KindMemory:
		mo := opts.Memory
		if err := mo.Validate(); err != nil {
			return nil, fmt.Errorf("limiter backend memory: %w", err)
		}
		if mo.Registerer == nil {
			mo.Registerer = opts.Registerer
		}
		return newAdmissionMetrics(opts.Registerer).observe(NewMemory(mo)), nil
	case KindRedis:
		if opts.Logger != nil {
			// go-redis logs through one process-wide logger.
			redis.SetLogger(redisLogger{opts.Logger})
		}
		if err := opts.Fallback.Validate(); err != nil {
			return nil, fmt.Errorf("limiter backend redis: %w", err)
		}
		ro := opts.Redis
		if ro.Registerer == nil {
			ro.Registerer = opts.Registerer
		}
		if ro.Logger == nil {
			ro.Logger = opts.Logger
		}
		r, err := NewRedis(ctx, ro)
		if err != nil {
			return nil, fmt.Errorf("limiter backend redis: %w", err)
		}
		m := newAdmissionMetrics(opts.Registerer)
		if opts.Fallback.Instances > 0 {
			var fallbacks *prometheus.CounterVec
			if m != nil {
				fallbacks = m.fallbacks
			}
			return m.observe(newFallback(r, opts.Fallback, fallbacks)), nil
		}
		return m.observe(r), nil
	}
	return nil, fmt.Errorf("limiter: unknown backend kind %d", opts.Kind)
}

// redisLogger carries go-redis's messages into the gateway's log.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.Log(ctx, slog.LevelWarn, "redis client", "detail", fmt.Sprintf(format, v...))
}
