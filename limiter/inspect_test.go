package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
)

// inspector is what the admin API asks of a backend.
type inspector interface {
	Evaluate(ctx context.Context, req limiter.Request) limiter.Outcome
	Peek(ctx context.Context, req limiter.Request) limiter.Outcome
	Reset(ctx context.Context, req limiter.Request) error
}

func peek(t *testing.T, b inspector, ps *limiter.PolicySet, subject string) limiter.Evaluated {
	t.Helper()
	o := b.Peek(context.Background(), limiter.Request{Policies: ps, Subject: subject})
	e, ok := o.(limiter.Evaluated)
	if !ok {
		t.Fatalf("peek: outcome %#v", o)
	}
	return e
}

func charge(t *testing.T, b inspector, ps *limiter.PolicySet, subject string, cost int64) limiter.Evaluated {
	t.Helper()
	o := b.Evaluate(context.Background(), limiter.Request{Policies: ps, Subject: subject, Cost: cost, EvaluationID: limitertest.Subject()})
	e, ok := o.(limiter.Evaluated)
	if !ok {
		t.Fatalf("evaluate: outcome %#v", o)
	}
	return e
}

// Peek reads what each policy has left, as the last decision said, and
// charges nothing however often it is asked; Reset makes the budgets whole.
func testPeekAndReset(t *testing.T, b inspector) {
	list := []*limiter.Policy{limitertest.FixedWindow(5, time.Minute), limitertest.TokenBucket(10, 1, time.Minute)}
	for _, p := range list {
		p.MaxCost = 5
		p.Clock = limiter.ClockBackend
		p.Dedup = limiter.Dedup{Enabled: true, TTL: time.Minute, MaxEntries: 10, MaxBytes: 4096}
	}
	ps := limiter.MustPolicySet(list...)
	subject := limitertest.Subject()
	fresh := peek(t, b, ps, subject)
	if got := fresh.PolicyDecision(0).Remaining; got != 5 {
		t.Fatalf("a fresh subject has %d of the window left, want 5", got)
	}
	if got := fresh.PolicyDecision(1).Remaining; got != 10 {
		t.Fatalf("a fresh subject has %d tokens left, want 10", got)
	}
	charge(t, b, ps, subject, 2)
	last := charge(t, b, ps, subject, 2)
	for range 3 {
		now := peek(t, b, ps, subject)
		for i := range ps.Len() {
			got, want := now.PolicyDecision(i), last.PolicyDecision(i)
			if got.Remaining != want.Remaining || got.Limit != want.Limit || got.ResetAfter > want.ResetAfter || got.ResetAfter < want.ResetAfter-2*time.Second {
				t.Fatalf("policy %d: peek %+v, the last decision %+v", i, got, want)
			}
		}
	}
	if d := charge(t, b, ps, subject, 1); !d.Allowed || d.PolicyDecision(0).Remaining != 0 {
		t.Fatalf("after the peeks a request of 1 got %+v, want allowed with 0 left: a peek charged, or the budget was wrong", d.Decision)
	}
	if d := charge(t, b, ps, subject, 1); d.Allowed {
		t.Fatalf("a spent window allowed %+v", d.Decision)
	}
	if err := b.Reset(context.Background(), limiter.Request{Policies: ps, Subject: subject}); err != nil {
		t.Fatal(err)
	}
	if d := charge(t, b, ps, subject, 5); !d.Allowed || d.PolicyDecision(1).Remaining != 5 {
		t.Fatalf("after a reset a request of 5 got %+v, want allowed with 5 tokens left", d)
	}
}

// A concurrency policy's state is the leases held: Peek counts them, and
// Reset frees them.
func testPeekAndResetLeases(t *testing.T, b inspector) {
	p := limitertest.Concurrency(2, time.Minute)
	ps := limitertest.One(p)
	subject := limitertest.Subject()
	charge(t, b, ps, subject, 1)
	for range 2 {
		if got := peek(t, b, ps, subject).Remaining; got != 1 {
			t.Fatalf("one lease held: %d free, want 1", got)
		}
	}
	if err := b.Reset(context.Background(), limiter.Request{Policies: ps, Subject: subject}); err != nil {
		t.Fatal(err)
	}
	if got := peek(t, b, ps, subject).Remaining; got != 2 {
		t.Fatalf("after a reset: %d free, want 2", got)
	}
}

func TestMemoryPeekReadsWithoutChargingAndResetForgets(t *testing.T) {
	m := limiter.NewMemory(limiter.MemoryOptions{})
	t.Cleanup(func() { m.Close() })
	testPeekAndReset(t, m)
	testPeekAndResetLeases(t, m)
}

func TestRedisPeekReadsWithoutChargingAndResetForgets(t *testing.T) {
	s := redistest.Start(t)
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
	testPeekAndReset(t, r)
	testPeekAndResetLeases(t, r)

	t.Run("a peek writes no key", func(t *testing.T) {
		c := s.Client(t)
		before := c.DBSize(context.Background()).Val()
		p := limitertest.TokenBucket(10, 1, time.Minute)
		peek(t, r, limitertest.One(p), limitertest.Subject())
		if after := c.DBSize(context.Background()).Val(); after != before {
			t.Fatalf("%d keys before the peek, %d after", before, after)
		}
	})
	t.Run("a reset deletes the state and the remembered evaluations", func(t *testing.T) {
		c := s.Client(t)
		p := limitertest.FixedWindow(5, time.Minute)
		p.Dedup = limiter.Dedup{Enabled: true, TTL: time.Minute, MaxEntries: 10, MaxBytes: 4096}
		ps := limitertest.One(p)
		subject := limitertest.Subject()
		before := c.DBSize(context.Background()).Val()
		charge(t, r, ps, subject, 1)
		charge(t, r, ps, subject, 1)
		if n := c.DBSize(context.Background()).Val(); n != before+1 {
			t.Fatalf("%d keys after two evaluations, want 1: the state, its remembered evaluations in it", n-before)
		}
		if err := r.Reset(context.Background(), limiter.Request{Policies: ps, Subject: subject}); err != nil {
			t.Fatal(err)
		}
		if n := c.DBSize(context.Background()).Val(); n != before {
			t.Fatalf("%d keys left after the reset", n-before)
		}
	})
}

func TestClusterPeekReadsWithoutChargingAndResetForgets(t *testing.T) {
	c := redistest.StartClusterWithReplicas(t)
	testPeekAndReset(t, redistest.NewLimiter(t, limiter.RedisOptions{Mode: limiter.RedisCluster, Addrs: c.Addrs()}))
}

// A reset on one instance frees the subject on another that remembers its
// denial, within a second.
func TestAResetReachesTheDenialsOfAnotherInstance(t *testing.T) {
	s := redistest.Start(t)
	testResetReachesAnotherInstance(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
}

// On Cluster too: the publish reaches the subscribers of every node.
func TestAResetReachesTheDenialsOfAnotherInstanceOnCluster(t *testing.T) {
	c := redistest.StartClusterWithReplicas(t)
	testResetReachesAnotherInstance(t, limiter.RedisOptions{Mode: limiter.RedisCluster, Addrs: c.Addrs()})
}

func testResetReachesAnotherInstance(t *testing.T, opts limiter.RedisOptions) {
	a := redistest.NewLimiter(t, opts)
	b := redistest.NewLimiter(t, opts)
	p := limitertest.FixedWindow(1, time.Hour)
	p.Clock = limiter.ClockBackend
	ps := limitertest.One(p)
	subject := limitertest.Subject()
	charge(t, a, ps, subject, 1)
	for _, r := range []*limiter.Redis{a, b} {
		charge(t, r, ps, subject, 1)
		if _, ok := r.StandingDenial(limiter.Request{Policies: ps, Subject: subject, Cost: 1}); !ok {
			t.Fatal("the denial is not remembered")
		}
	}
	if err := a.Reset(context.Background(), limiter.Request{Policies: ps, Subject: subject}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Second)
	for {
		if _, ok := b.StandingDenial(limiter.Request{Policies: ps, Subject: subject, Cost: 1}); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the other instance still remembers the denial a second after the reset")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d := charge(t, b, ps, subject, 1); !d.Allowed {
		t.Fatalf("after the reset the other instance got %+v", d.Decision)
	}
}
