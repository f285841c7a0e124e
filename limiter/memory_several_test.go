package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
)

// A request with several policies whose new key evicts the key of another
// of its policies from a full shard must not write that policy's state
// into the slot the new key took: one policy is never charged with another's
// count.
func TestSeveralPoliciesOnAFullShardKeepTheirKeysApart(t *testing.T) {
	m := limiter.NewMemory(limiter.MemoryOptions{MaxEntries: 64}) // one key a shard
	t.Cleanup(func() { m.Close() })
	// Two policies and a subject whose keys share a shard, each try with
	// policies of its own: about one pair in 200 never shares a shard,
	// whatever the subject. (On amd64 maphash sums a key of this length
	// as the XOR of what it makes of each 16-byte block: two keys that
	// differ only in their first block, names alike in their last two
	// characters, differ in the same bits for every subject.)
	var a, b *limiter.Policy
	subject := ""
	for range 10000 {
		a, b = limitertest.FixedWindow(10, time.Minute), limitertest.FixedWindow(10, time.Minute)
		if s := limitertest.Subject(); m.SameShard(a, b, s) {
			subject = s
			break
		}
	}
	if subject == "" {
		t.Fatal("no policies and subject whose keys share a shard")
	}
	a.Dedup, b.Dedup = limiter.Dedup{}, limiter.Dedup{}
	for range 5 {
		evaluateMemory(t, m, b, subject, 1, "")
	}
	o := m.Evaluate(context.Background(), limiter.Request{Policies: limiter.MustPolicySet(a, b), Subject: subject, Cost: 1})
	if e, ok := o.(limiter.Evaluated); !ok || !e.Allowed {
		t.Fatalf("outcome %#v, want allowed", o)
	}
	// a was charged once; whatever the shard could keep, a never holds b's
	// six.
	if d := evaluateMemory(t, m, a, subject, 1, ""); d.Remaining < 8 {
		t.Fatalf("a has %d left after two requests of 10; it holds b's count", d.Remaining)
	}
}
