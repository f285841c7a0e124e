package limiter

import (
	"context"
	"sync"
	"time"
)

// Penalty is a subject refused on a route until it ends, whatever its
// budgets hold: a policy with a Penalty refused it (the penalty box). It
// names the subject by its pseudonym only.
type Penalty struct {
	Route, Policy, Pseudonym string
	// Start is when the policy refused; Until when the penalty ends, Start
	// plus the policy's Penalty then. A reload that shortens or removes
	// the policy's Penalty shortens or lifts it: the caller holds it to
	// the policy it has (Penalty.Ends).
	Start, Until time.Time
}

// Ends is when p ends under a policy whose penalty is now d: Until, or
// earlier when d is shorter than it was; the zero time when d is 0 (the
// penalty was removed: p is lifted).
func (p Penalty) Ends(d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	if end := p.Start.Add(d); end.Before(p.Until) {
		return end
	}
	return p.Until
}

// Penalties keeps a backend's penalties. Impose and Lift apply at once on
// the instance that calls them and, on Redis, on every other instance
// sharing the backend within a second (redis_penalties.go); Find answers
// from this instance's memory, with no round trip, so the request path
// may ask it before every decision. A penalty is gone by itself at Until.
type Penalties interface {
	Impose(ctx context.Context, p Penalty) error
	// Find is the penalty of pseudonym on route in force at now.
	Find(route, pseudonym string, now time.Time) (Penalty, bool)
	// List is the penalties in force at now on route.
	List(route string, now time.Time) []Penalty
	// Lift ends the penalty of pseudonym on route; false when there was
	// none.
	Lift(ctx context.Context, route, pseudonym string) (bool, error)
}

// maxPenalties bounds the penalties one instance remembers. Past it an
// imposed penalty is dropped after the expired ones (the subject's
// policy still refuses it by its budget).
const maxPenalties = 100_000

// penaltyBook is the penalties one instance remembers, by route and
// pseudonym.
type penaltyBook struct {
	mu sync.Mutex
	m  map[penaltyID]Penalty
	// lifted is when each penalty lifted lately was: a penalty that
	// started before then and comes late (a message published before the
	// lift) stays lifted.
	lifted map[penaltyID]time.Time
}

// liftMemory is how long a lift is remembered against late messages:
// far longer than a publish takes to arrive.
const liftMemory = 10 * time.Second

type penaltyID struct{ route, pseudonym string }

// put records p unless a penalty of the same subject that ends later is
// there already; it reports whether p was recorded.
func (b *penaltyBook) put(p Penalty, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	id := penaltyID{p.Route, p.Pseudonym}
	if old, ok := b.m[id]; ok && !old.Until.Before(p.Until) {
		return false
	}
	if at, ok := b.lifted[id]; ok && !p.Start.After(at) {
		return false
	}
	if b.m == nil {
		b.m = map[penaltyID]Penalty{}
	}
	if len(b.m) >= maxPenalties {
		for k, q := range b.m {
			if !q.Until.After(now) {
				delete(b.m, k)
			}
		}
		if len(b.m) >= maxPenalties {
			return false
		}
	}
	b.m[id] = p
	return true
}

func (b *penaltyBook) find(route, pseudonym string, now time.Time) (Penalty, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.m[penaltyID{route, pseudonym}]
	if ok && !p.Until.After(now) {
		return Penalty{}, false // dropped by the next list or put past the bound
	}
	return p, ok
}

func (b *penaltyBook) list(route string, now time.Time) []Penalty {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Penalty
	for id, p := range b.m {
		switch {
		case !p.Until.After(now):
			delete(b.m, id)
		case id.route == route:
			out = append(out, p)
		}
	}
	return out
}

func (b *penaltyBook) lift(route, pseudonym string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	id := penaltyID{route, pseudonym}
	p, ok := b.m[id]
	delete(b.m, id)
	if b.lifted == nil {
		b.lifted = map[penaltyID]time.Time{}
	}
	for k, at := range b.lifted {
		if now.Sub(at) > liftMemory {
			delete(b.lifted, k)
		}
	}
	if len(b.lifted) < maxPenalties {
		b.lifted[id] = now
	}
	return ok && p.Until.After(now)
}
