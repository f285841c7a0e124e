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
// kept: a Certain decision (so never the sliding counter's estimate), for
// the exact policy value (a reloaded policy is another pointer, so it never
// meets the denials of its predecessor) and cost that were refused. The
// retry time is counted from before the request was sent, so the entry
// ends no later than the backend's own denial would (a millisecond sooner,
// for the scripts' rounding). A fixed window cannot
// admit before it ends; a token bucket only gains tokens with time, and
// other instances can only spend them.
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

type denialKey struct {
	policy *Policy
	// set is the first element of a request's Policies, nil for one policy:
	// a route with several policies is remembered as a whole.
	set     **Policy
	subject string
	cost    int64
}

type denial struct {
	retryAt, resetAt time.Time // as the backend said, for the answer
	until            time.Time // when the entry stops answering
	remaining        int64
	each             []denialPart // one per policy, for several
}

type denialPart struct {
	allowed          bool
	remaining        int64
	retryAt, resetAt time.Time
}

func newDenials(entries int) *denials {
	d := &denials{seed: maphash.MakeSeed(), perShard: max(entries/denialShards, 1)}
	for i := range d.shards {
		d.shards[i].m = make(map[denialKey]denial)
	}
	return d
}

func (d *denials) shard(k denialKey) *denialShard {
	return &d.shards[maphash.String(d.seed, k.subject)%denialShards]
}

// standing returns the denial remembered under k while it stands at now,
// and forgets one that no longer does.
func (d *denials) standing(k denialKey, now time.Time) (denial, bool) {
	s := d.shard(k)
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
	s := d.shard(k)
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

// get returns the decision a remembered denial still stands for at now.
func (d *denials) get(k denialKey, now time.Time) (Decision, bool) {
	e, ok := d.standing(k, now)
	if !ok {
		return Decision{}, false
	}
	return Decision{
		Allowed: false, Limit: k.policy.Quota(), Remaining: e.remaining,
		ResetAfter: max(e.resetAt.Sub(now), 0), RetryAfter: e.retryAt.Sub(now), Certainty: Certain,
	}, true
}

// put remembers dec, decided for a request sent at sent, when it is a
// denial that is certain to stand until its retry time.
func (d *denials) put(k denialKey, dec Decision, sent time.Time) {
	if dec.Allowed || dec.Certainty != Certain || dec.RetryAfter <= 0 {
		return
	}
	// The scripts count whole milliseconds, rounded down: the backend's
	// "now" can be up to a millisecond before sent, and its retry time as
	// much later. One millisecond off keeps the entry within the denial.
	if dec.RetryAfter <= time.Millisecond {
		return
	}
	e := denial{retryAt: sent.Add(dec.RetryAfter), resetAt: sent.Add(dec.ResetAfter),
		until: sent.Add(dec.RetryAfter - time.Millisecond), remaining: dec.Remaining}
	d.store(k, e)
}

// getAll is get for a request with several policies: the whole decision
// as it was, each policy's times counted down to now.
func (d *denials) getAll(k denialKey, ps []*Policy, now time.Time) (Evaluated, bool) {
	e, ok := d.standing(k, now)
	if !ok || len(e.each) != len(ps) {
		return Evaluated{}, false
	}
	each := make([]Decision, len(ps))
	for i, p := range ps {
		part := e.each[i]
		certainty := Certain
		if p.Algorithm == SlidingCounter {
			certainty = Approximate
		}
		each[i] = Decision{Allowed: part.allowed, Limit: p.Quota(), Remaining: part.remaining,
			ResetAfter: max(part.resetAt.Sub(now), 0), RetryAfter: max(part.retryAt.Sub(now), 0), Certainty: certainty}
	}
	return evaluatedAll(ps, each), true
}

// putAll remembers a refused request with several policies for as long as
// one of its enforced policies' denials is certain to stand: while one
// does, the route refuses whatever the others would say.
func (d *denials) putAll(k denialKey, ps []*Policy, o Evaluated, sent time.Time) {
	if o.Allowed {
		return
	}
	var stands time.Duration
	for i, p := range ps {
		if dec := o.Policies[i]; !p.Shadow && !dec.Allowed && dec.Certainty == Certain {
			stands = max(stands, dec.RetryAfter)
		}
	}
	if stands <= time.Millisecond { // see put
		return
	}
	e := denial{until: sent.Add(stands - time.Millisecond), each: make([]denialPart, len(ps))}
	for i, dec := range o.Policies {
		e.each[i] = denialPart{allowed: dec.Allowed, remaining: dec.Remaining,
			retryAt: sent.Add(dec.RetryAfter), resetAt: sent.Add(dec.ResetAfter)}
	}
	d.store(k, e)
}
