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
	policy  *Policy
	subject string
	cost    int64
}

type denial struct {
	retryAt, resetAt time.Time // as the backend said, for the answer
	until            time.Time // when the entry stops answering
	remaining        int64
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

// get returns the decision a remembered denial still stands for at now.
func (d *denials) get(k denialKey, now time.Time) (Decision, bool) {
	s := d.shard(k)
	s.mu.Lock()
	e, ok := s.m[k]
	if ok && !now.Before(e.until) {
		delete(s.m, k)
		ok = false
	}
	s.mu.Unlock()
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
