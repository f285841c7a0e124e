package limiter

import (
	"container/heap"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

// maxPenalties bounds the penalties one instance remembers.
const maxPenalties = 100_000

// penaltyBook is the penalties one instance remembers, by route and
// pseudonym. Full, it makes room by route (makeRoom), so that the routes
// share it evenly: a route's flood of subjects a client picks takes room
// only from routes that hold more than it, down to equal shares, and a
// route holding no more than an even share keeps all it holds.
type penaltyBook struct {
	mu sync.Mutex
	// routes holds no route without a penalty.
	routes map[string]*routePenalties
	// held counts the penalties of every route, ended or not.
	held int
	// lifted is when each penalty lifted lately was: a penalty that
	// started before then and comes late (a message published before the
	// lift) stays lifted.
	lifted map[penaltyID]time.Time
	// evictions count the penalties ended early to make room (evicted),
	// and those not held for want of room (refused).
	evictions evictionCounts
}

// evictionCounts count what a full store (a memory shard, the penalty
// book) did to make room: entries dropped early (evicted), and new ones
// refused because none could go (refused).
type evictionCounts struct {
	evicted, refused atomic.Uint64
}

// register exports the counts to reg as the counter opts name, one series
// a result.
func (c *evictionCounts) register(reg prometheus.Registerer, opts prometheus.CounterOpts) {
	for result, n := range map[string]*atomic.Uint64{"evicted": &c.evicted, "refused": &c.refused} {
		o := opts
		o.ConstLabels = prometheus.Labels{"result": result}
		reg.MustRegister(prometheus.NewCounterFunc(o, func() float64 { return float64(n.Load()) }))
	}
}

// routePenalties are one route's penalties, by pseudonym and by end.
type routePenalties struct {
	bySubject map[string]*heldPenalty
	ends      penaltiesByEnd
}

// heldPenalty is a penalty in the book; at is its place in its route's
// ends.
type heldPenalty struct {
	Penalty
	at int
}

// penaltiesByEnd is a heap (container/heap) of penalties, the one that
// ends soonest first.
type penaltiesByEnd []*heldPenalty

func (h penaltiesByEnd) Len() int           { return len(h) }
func (h penaltiesByEnd) Less(i, j int) bool { return h[i].Until.Before(h[j].Until) }
func (h penaltiesByEnd) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].at, h[j].at = i, j
}
func (h *penaltiesByEnd) Push(x any) {
	p := x.(*heldPenalty)
	p.at = len(*h)
	*h = append(*h, p)
}
func (h *penaltiesByEnd) Pop() any {
	old := *h
	p := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return p
}

// liftMemory is how long a lift is remembered against late messages:
// far longer than a publish takes to arrive.
const liftMemory = 10 * time.Second

type penaltyID struct{ route, pseudonym string }

// put records p unless a penalty of the same subject that ends no
// sooner, or a later lift, stands (stands), or the book has no room for it
// (makeRoom; counted as refused).
func (b *penaltyBook) put(p Penalty, now time.Time) (stands bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	rp := b.routes[p.Route]
	var old *heldPenalty
	if rp != nil {
		old = rp.bySubject[p.Pseudonym]
	}
	if old != nil && !old.Until.Before(p.Until) {
		return true
	}
	if at, ok := b.lifted[penaltyID{p.Route, p.Pseudonym}]; ok && !p.Start.After(at) {
		return true
	}
	if old != nil {
		old.Penalty = p
		heap.Fix(&rp.ends, old.at)
		return false
	}
	if b.held >= maxPenalties {
		b.dropEnded(now)
		if b.held >= maxPenalties && !b.makeRoom(p) {
			b.evictions.refused.Add(1)
			return false
		}
		rp = b.routes[p.Route]
	}
	if rp == nil {
		if b.routes == nil {
			b.routes = map[string]*routePenalties{}
		}
		rp = &routePenalties{bySubject: map[string]*heldPenalty{}}
		b.routes[p.Route] = rp
	}
	held := &heldPenalty{Penalty: p}
	rp.bySubject[p.Pseudonym] = held
	heap.Push(&rp.ends, held)
	b.held++
	return false
}

// makeRoom ends early the penalty that ends soonest on the route that
// holds most, p's own on a tie; on p's own route only when that one ends
// before p. It reports whether it did.
func (b *penaltyBook) makeRoom(p Penalty) bool {
	fullest, most := p.Route, 0
	if rp := b.routes[p.Route]; rp != nil {
		most = len(rp.ends)
	}
	for route, rp := range b.routes {
		if len(rp.ends) > most {
			fullest, most = route, len(rp.ends)
		}
	}
	rp := b.routes[fullest]
	soonest := rp.ends[0]
	if fullest == p.Route && !soonest.Until.Before(p.Until) {
		return false
	}
	b.remove(rp, soonest)
	b.evictions.evicted.Add(1)
	return true
}

// remove takes p out of its route's penalties rp.
func (b *penaltyBook) remove(rp *routePenalties, p *heldPenalty) {
	heap.Remove(&rp.ends, p.at)
	delete(rp.bySubject, p.Pseudonym)
	b.held--
	if len(rp.ends) == 0 {
		delete(b.routes, p.Route)
	}
}

// dropEnded removes the penalties that ended at now.
func (b *penaltyBook) dropEnded(now time.Time) {
	for _, rp := range b.routes {
		for len(rp.ends) > 0 && !rp.ends[0].Until.After(now) {
			b.remove(rp, rp.ends[0])
		}
	}
}

func (b *penaltyBook) find(route, pseudonym string, now time.Time) (Penalty, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	rp := b.routes[route]
	if rp == nil {
		return Penalty{}, false
	}
	p, ok := rp.bySubject[pseudonym]
	if !ok || !p.Until.After(now) {
		return Penalty{}, false // an ended one is dropped by the next list or full put
	}
	return p.Penalty, true
}

func (b *penaltyBook) list(route string, now time.Time) []Penalty {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dropEnded(now)
	rp := b.routes[route]
	if rp == nil {
		return nil
	}
	out := make([]Penalty, 0, len(rp.ends))
	for _, p := range rp.ends {
		out = append(out, p.Penalty)
	}
	return out
}

func (b *penaltyBook) lift(route, pseudonym string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	id := penaltyID{route, pseudonym}
	found := false
	if rp := b.routes[route]; rp != nil {
		if p, ok := rp.bySubject[pseudonym]; ok {
			found = p.Until.After(now)
			b.remove(rp, p)
		}
	}
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
	return found
}

// register exports the book's counts to reg.
func (b *penaltyBook) register(reg prometheus.Registerer) {
	b.evictions.register(reg, prometheus.CounterOpts{Name: "gateway_limiter_penalty_evictions_total", Help: "Penalties this instance's book, full, ended early to make room (result=evicted) or did not hold (result=refused: every penalty on the penalty's route, which held most, ended later); either subject is out of the penalty box on this instance."})
}
