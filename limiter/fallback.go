package limiter

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgegate/gateway/internal/option"
)

// FallbackOptions configure the local fallback: while the shared backend
// cannot decide, each gateway instance decides alone, with every budget
// divided by Instances, rounded up (limit, capacity and refill alike). With
// N instances that fall back together, at most N × ceil(limit / N) requests
// are admitted per window: a bounded overshoot of at most N - 1, instead of
// a refusal of everyone. Zero Instances: no fallback, fail closed.
type FallbackOptions struct {
	Instances int
}

// Validate reports a negative Instances as a *option.Error naming the field
// as a fallback block does ("instances"). Open refuses what it reports.
func (o FallbackOptions) Validate() error {
	if o.Instances < 0 {
		return &option.Error{Field: "instances", Summary: "Value too small", Detail: "instances must be at least 1."}
	}
	return nil
}

// fallback is a Backend that asks the shared one first and, when it cannot
// decide (Unavailable, Indeterminate, a breaker open), asks an in-process
// Memory backend with the divided policies. Its decisions say Fallback.
type fallback struct {
	shared    Backend
	local     *Memory
	instances int64

	// The scaled policies, made once per policy value. Each reload brings
	// new values, so both maps are emptied when they reach maxScaled:
	// the memory backend keys its state by name and revision, never by
	// pointer, so a policy scaled again finds its budget where it was.
	mu     sync.Mutex
	scaled map[*Policy]*Policy
	sets   map[*PolicySet]*PolicySet // scaled Request.Policies

	// decisions counts the fallback's decisions of admissions made for a
	// route, by route, policy and decision; nil without a Registerer.
	decisions *prometheus.CounterVec
}

const maxScaled = 4096

// newFallback falls back from shared; fallbacks, when not nil, counts
// its decisions of admissions made for a route.
func newFallback(shared Backend, opts FallbackOptions, fallbacks *prometheus.CounterVec) *fallback {
	return &fallback{shared: shared, local: NewMemory(MemoryOptions{}), instances: int64(opts.Instances),
		scaled: map[*Policy]*Policy{}, sets: map[*PolicySet]*PolicySet{}, decisions: fallbacks}
}

func (f *fallback) Evaluate(ctx context.Context, req Request) Outcome {
	if req.settles != nil {
		// Where its admission was made: a local one settles locally.
		return req.settles.settle(ctx, req)
	}
	o := f.shared.Evaluate(ctx, req)
	switch o.(type) {
	case Unavailable, Indeterminate:
	default:
		return o
	}
	if ctx.Err() != nil || req.Policies == nil {
		return o // the client went away; nobody needs a decision
	}
	local := req
	local.Policies = f.scaleAll(req.Policies)
	local.Deadline = time.Time{}
	lo := f.local.Evaluate(context.WithoutCancel(ctx), local)
	e, ok := lo.(Evaluated)
	if !ok {
		return o
	}
	e.Fallback = true
	if f.decisions != nil && req.observed() {
		for i, p := range req.Policies.list {
			f.decisions.WithLabelValues(req.Route, p.Name, fallbackDecision(e.PolicyDecision(i).Allowed)).Inc()
		}
	}
	return e
}

// fallbackDecision is gateway_limiter_fallback_total's decision label.
func fallbackDecision(allowed bool) string {
	if allowed {
		return "allowed"
	}
	return "denied"
}

// scaleAll is scale for every policy of a set, made once per set.
func (f *fallback) scaleAll(set *PolicySet) *PolicySet {
	f.mu.Lock()
	s, ok := f.sets[set]
	f.mu.Unlock()
	if ok {
		return s
	}
	ps := make([]*Policy, set.Len())
	for i, p := range set.list {
		ps[i] = f.scale(p)
	}
	s = compileSet(ps)
	f.mu.Lock()
	if len(f.sets) >= maxScaled {
		clear(f.sets)
	}
	f.sets[set] = s
	f.mu.Unlock()
	return s
}

// scale is p with every budget divided by the number of instances, made
// once per policy value.
func (f *fallback) scale(p *Policy) *Policy {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.scaled[p]; ok {
		return s
	}
	s := *p
	s.Limit = ceilDiv(p.Limit, f.instances)
	s.Capacity = ceilDiv(p.Capacity, f.instances)
	s.RefillTokens = ceilDiv(p.RefillTokens, f.instances)
	s.MaxCost = min(p.MaxCost, s.Quota())
	s.Reserve = min(p.Reserve, s.MaxCost)
	s.Clock = ClockBackend // the process is this backend's store
	if len(f.scaled) >= maxScaled {
		clear(f.scaled)
	}
	f.scaled[p] = &s
	return &s
}

func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return a
	}
	return (a + b - 1) / b
}

// Ready is the shared backend's: an instance running on its fallback is
// not ready, so that operators see the outage.
func (f *fallback) Ready(ctx context.Context) error { return f.shared.Ready(ctx) }

func (f *fallback) Close() error {
	f.local.Close()
	return f.shared.Close()
}

// Overrides are the shared backend's: the fallback decides by the
// configured limits alone.
func (f *fallback) Overrides() Overrides { return f.shared.Overrides() }

// Penalties are the shared backend's: each instance remembers them, so
// they hold through an outage of Redis.
func (f *fallback) Penalties() Penalties { return f.shared.Penalties() }

// Peek is the shared backend's: the fallback's own state is of an outage.
func (f *fallback) Peek(ctx context.Context, req Request) Outcome {
	return f.shared.Peek(ctx, req)
}

// Reset resets the subject on the shared backend and in the fallback's own
// state, so that neither holds a spent budget for it.
func (f *fallback) Reset(ctx context.Context, req Request) error {
	if err := f.shared.Reset(ctx, req); err != nil {
		return err
	}
	local := req
	local.Policies = f.scaleAll(req.Policies)
	return f.local.Reset(ctx, local)
}

// StandingDenial is the shared backend's: the fallback's own state is of
// an outage, and may be stale once Redis decides again.
func (f *fallback) StandingDenial(req Request) (Evaluated, bool) {
	return f.shared.StandingDenial(req)
}
