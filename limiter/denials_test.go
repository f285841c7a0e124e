package limiter

import (
	"strconv"
	"testing"
	"time"
)

func TestDenialsStayWithinTheirBound(t *testing.T) {
	d := newDenials(64)
	set := MustPolicySet(&Policy{Name: "p", Algorithm: FixedWindow, Limit: 1, Window: time.Minute, MaxCost: 1, Revision: 1})
	now := time.Now()
	deny := Decision{Limit: 1, ResetAfter: time.Minute, RetryAfter: time.Minute, Certainty: Certain}
	for i := 0; i < 10_000; i++ {
		d.put(denialKey{set, "s" + strconv.Itoa(i), 1}, Evaluated{Decision: deny}, now)
	}
	n := 0
	for i := range d.shards {
		n += len(d.shards[i].m)
	}
	if n > 64 {
		t.Fatalf("%d entries held, bound 64", n)
	}
	// The newest of each shard is always kept.
	if _, ok := d.get(denialKey{set, "s9999", 1}, now); !ok {
		t.Fatal("the newest denial was dropped")
	}
}

func TestOnlyDenialsCertainToStandAreRemembered(t *testing.T) {
	set := MustPolicySet(&Policy{Name: "p", Algorithm: FixedWindow, Limit: 1, Window: time.Minute, MaxCost: 1, Revision: 1})
	now := time.Now()
	for _, tc := range []struct {
		name string
		dec  Decision
	}{
		{"an allow", Decision{Allowed: true, Certainty: Certain, RetryAfter: time.Second}},
		{"an approximate denial", Decision{Certainty: Approximate, RetryAfter: time.Second}},
		{"a denial with no retry time", Decision{Certainty: Certain}},
	} {
		d := newDenials(64)
		k := denialKey{set, "s", 1}
		d.put(k, Evaluated{Decision: tc.dec}, now)
		if _, ok := d.get(k, now); ok {
			t.Errorf("%s was remembered", tc.name)
		}
	}
}
