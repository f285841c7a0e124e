package limiter

import (
	"hash/maphash"
	"sync"
	"time"
)

// denials remembers, inside one gateway instance, the certain denials the
// shared backend gave, so that a subject that keeps asking while it is over
// its limit is answered without a round trip until its denial can end.
//
// Only a denial that cannot turn into an allow before its retry time is
// kept: a Certain decision (never an estimate), for
// the exact policy set and cost that were refused. The
// retry time is counted from before the request was sent, so the entry
// ends no later than the backend's own denial would (a millisecond sooner,
// for the scripts' rounding). A concurrency denial is never kept: any
// release may end it. A denial of a policy with leases of budget is kept
// for at most budgetIdle: another instance's idle lease may end it. Nor is
// the denial of a policy charged by the response: any settlement may give
// back part of a reserve (endsEarly). A fixed window cannot
// admit before it ends; a token bucket only gains tokens with time, and
// other instances can only spend them. (A held request's place given back
// can end one: this instance then forgets the subject's, Redis.GiveBack.)
//
// It holds at most denialShards * perShard entries; a full shard drops an
// arbitrary entry, and an expired entry is dropped when it is next read.
type denials struct {
	seed     maphash.Seed
	perShard int
	shards   [denialShards]denialShard
}

const denialShards = 16

// defaultDenialEntries bounds the cache when RedisOptions leaves it zero:
// about 150 bytes an entry, so a few MiB.
const defaultDenialEntries = 1 << 15

type denialShard struct {
	mu sync.Mutex
	m  map[denialKey]denial
}

// denialKey is what a request is remembered under: its policy set (a
// reloaded set is another one, so it never meets the denials of its
// predecessor), its subject and its cost.
type denialKey struct {
	set     *PolicySet
	subject string
	cost    int64
}

// denial is a refused request as the backend decided it, each policy's
// part by position.
type denial struct {
	until time.Time // when the entry stops answering
	each  []denialPart
}

type denialPart struct {
	allowed          bool
	remaining        int64
	retryAt, resetAt time.Time // as the backend said, for the answer
}

func newDenials(entries int) *denials {
	d := &denials{seed: maphash.MakeSeed(), perShard: max(entries/denialShards, 1)}
	for i := range d.shards {
		d.shards[i].m = make(map[denialKey]denial)
	}
	return d
}

// shard holds the denials of subject: all of them, whatever their
// policies and cost.
func (d *denials) shard(subject string) *denialShard {
	return &d.shards[maphash.String(d.seed, subject)%denialShards]
}

// standing returns the denial remembered under k while it stands at now,
// and forgets one that no longer does.
func (d *denials) standing(k denialKey, now time.Time) (denial, bool) {
	s := d.shard(k.subject)
	s.mu.Lock()
	e, ok := s.m[k]
	if ok && !now.Before(e.until) {
		delete(s.m, k)
		ok = false
	}
	s.mu.Unlock()
	return e, ok
}

// store remembers e under k; a full shard forgets some other entry first.
func (d *denials) store(k denialKey, e denial) {
	s := d.shard(k.subject)
	s.mu.Lock()
	if _, ok := s.m[k]; !ok && len(s.m) >= d.perShard {
		for old := range s.m {
			delete(s.m, old)
			break
		}
	}
	s.m[k] = e
	s.mu.Unlock()
}

// forget drops every denial remembered of subject, whatever its policies
// and cost: the subject was reset.
func (d *denials) forget(subject string) {
	s := d.shard(subject)
	s.mu.Lock()
	for k := range s.m {
		if k.subject == subject {
			delete(s.m, k)
		}
	}
	s.mu.Unlock()
}

// get returns the outcome a remembered denial still stands for at now: the
// whole decision as it was, each policy's times counted down to now.
func (d *denials) get(k denialKey, now time.Time) (Evaluated, bool) {
	ps := k.set.list
	e, ok := d.standing(k, now)
	if !ok || len(e.each) != len(ps) {
		return Evaluated{}, false
	}
	var eachOn [scratchPolicies]Decision
	each := eachOn[:0]
	for i, p := range ps {
		part := e.each[i]
		each = append(each, p.decision(part.allowed, part.remaining,
			max(part.resetAt.Sub(now), 0), max(part.retryAt.Sub(now), 0), now.UnixMilli()))
	}
	return evaluated(ps, each), true
}

// endsEarly reports whether a denial of p may end before its retry time
// by what another request gives back: a lease released (concurrency), a
// reserve larger than its response's cost (a policy charged by the
// response). Such a denial is never kept.
func endsEarly(p *Policy) bool { return p.HoldsLeases() || p.ChargedByResponse() }

// put remembers o, decided for a request sent at sent, while it is certain
// to stand. Nothing was charged for either kind of request it keeps: a
// refused one, kept while one of its enforced policies' certain denials
// stands (while one does, the request is refused whatever the others
// say), and one that every policy denied, all of them shadow ones, kept
// while every denial is certain and stands.
func (d *denials) put(k denialKey, o Evaluated, sent time.Time) {
	ps := k.set.list
	refused := false
	for i, p := range ps {
		if !p.Shadow && !o.PolicyDecision(i).Allowed {
			refused = true
		}
	}
	var stands time.Duration
	for i, p := range ps {
		dec := o.PolicyDecision(i)
		switch {
		case refused:
			if !p.Shadow && !dec.Allowed && dec.Certainty == Certain && !endsEarly(p) {
				stands = max(stands, dec.RetryAfter)
			}
		case dec.Allowed || dec.Certainty != Certain || endsEarly(p):
			return
		case i == 0 || dec.RetryAfter < stands:
			stands = dec.RetryAfter
		}
	}
	// Another instance's idle lease of budget may give units back: a
	// denial of a policy with leases stands no longer than a lease idles.
	for _, p := range ps {
		if p.Lease > 1 {
			stands = min(stands, budgetIdle)
		}
	}
	// The scripts count whole milliseconds, rounded down: the backend's
	// "now" can be up to a millisecond before sent, and its retry time as
	// much later. One millisecond off keeps the entry within the denial.
	if stands <= time.Millisecond {
		return
	}
	e := denial{until: sent.Add(stands - time.Millisecond), each: make([]denialPart, len(ps))}
	for i := range ps {
		dec := o.PolicyDecision(i)
		e.each[i] = denialPart{allowed: dec.Allowed, remaining: dec.Remaining,
			retryAt: sent.Add(dec.RetryAfter), resetAt: sent.Add(dec.ResetAfter)}
	}
	d.store(k, e)
}
