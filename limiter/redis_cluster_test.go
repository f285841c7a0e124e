package limiter_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
)

// A Cluster moves slots between masters (resharding) and promotes
// replicas; the backend follows both without a restart, charges each
// decision once, and a redirect never counts against a node's breaker.

func TestRedisClusterFollowsASlotMigration(t *testing.T) {
	c := redistest.StartCluster(t)
	r := redistest.NewLimiter(t, limiter.RedisOptions{Mode: limiter.RedisCluster, Addrs: c.Addrs(), KeyPrefix: "mig:"})
	for _, dedup := range []bool{false, true} {
		name := "without de-duplication, ASK is followed while the slot is half-moved"
		if dedup {
			name = "with de-duplication, ASK is followed, and a route whose keys are not yet made is a fast 503 (TRYAGAIN) that opens no breaker"
		}
		t.Run(name, func(t *testing.T) {
			p := limitertest.FixedWindow(100, time.Hour)
			p.Clock = limiter.ClockBackend
			p.Dedup.Enabled = dedup
			subject := limitertest.Subject()
			slot := c.Slot(t, r.Key(p, subject))
			from := c.Owner(t, slot)
			to := c.Nodes[0]
			if to == from {
				to = c.Nodes[1]
			}
			// A neighbour: another subject whose key stays on the source.
			var neighbour string
			for i := 0; neighbour == ""; i++ {
				s := fmt.Sprint(subject, "-n", i)
				if n := c.Slot(t, r.Key(p, s)); n != slot && c.Owner(t, n) == from {
					neighbour = s
				}
			}
			used := int64(0)
			decide := func(when string) {
				t.Helper()
				used++
				d := mustAllow(t, first(evaluate(r, p, subject, fmt.Sprint(when, used))))
				if d.Remaining != 100-used {
					t.Fatalf("%s: remaining %d, want %d: the count did not move with the slot", when, d.Remaining, 100-used)
				}
			}
			for range 3 {
				decide("before")
			}
			c.MigrateSlot(t, slot, from, to, func() {
				for range 8 {
					decide("half-moved")
				}
				if dedup {
					// A new policy of the subject: its key, on the same
					// slot, is on neither node yet; the target takes a
					// script over one missing key (ASK is followed). A
					// route of two new policies: the target refuses a
					// script over several missing keys before it runs
					// (TRYAGAIN), not with the deadline run out
					// (Indeterminate).
					q, q2 := limitertest.FixedWindow(100, time.Hour), limitertest.FixedWindow(100, time.Hour)
					q.Clock, q2.Clock = limiter.ClockBackend, limiter.ClockBackend
					mustAllow(t, first(evaluate(r, q, subject, "half-moved-new")))
					var slowest time.Duration
					for i := range 8 {
						ctx, cancel := context.WithTimeout(context.Background(), limiter.DefaultDeadline)
						start := time.Now()
						o := r.Evaluate(ctx, limiter.Request{Policies: limiter.MustPolicySet(q, q2), Subject: subject, Cost: 1, EvaluationID: fmt.Sprint("half-moved-new-route", i)})
						took := time.Since(start)
						cancel()
						if u, ok := o.(limiter.Unavailable); !ok || u.Category != limiter.UnavailableBeforeSend {
							t.Fatalf("half-moved with de-duplication, a route of new keys: outcome %#v, want Unavailable before send (TRYAGAIN)", o)
						}
						slowest = max(slowest, took)
					}
					t.Logf("half-moved with de-duplication, a route of new keys: the slowest of 8 refusals took %v", slowest)
				}
				// Eight redirects and TRYAGAINs in a row: the source's
				// breaker (5 failures) must still be closed.
				mustAllow(t, first(evaluate(r, p, neighbour, "neighbour")))
			})
			for range 3 {
				decide("after")
			}
			if o := c.Owner(t, slot); o != to {
				t.Fatalf("slot %d is served by %s, want %s", slot, o.Addr, to.Addr)
			}
		})
	}
}

func TestRedisClusterFollowsAReplicaPromotion(t *testing.T) {
	if testing.Short() {
		t.Skip("a failover takes seconds")
	}
	// The masters are listed every 50ms: a demoted or dead master's
	// batcher and breaker are let go of soon after.
	defer limiter.SetRestartWatchInterval(limiter.SetRestartWatchInterval(50 * time.Millisecond))
	c := redistest.StartClusterWithReplicas(t)
	r := redistest.NewLimiter(t, limiter.RedisOptions{Mode: limiter.RedisCluster, Addrs: c.Addrs(), KeyPrefix: "promo:"})
	// The start-up canaries went to every master.
	threeNodes := func(when string) {
		t.Helper()
		for deadline := time.Now().Add(3 * time.Second); r.NodeStates() != 3; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the backend holds %d nodes' batchers and breakers, want the 3 masters'", when, r.NodeStates())
			}
		}
	}
	threeNodes("at the start")
	p := limitertest.FixedWindow(100, time.Hour)
	p.Clock = limiter.ClockBackend
	subject := limitertest.Subject()
	slot := c.Slot(t, r.Key(p, subject))
	master := c.Owner(t, slot)
	replica := c.ReplicaOf(t, master)
	used := int64(0)
	for range 3 {
		used++
		mustAllow(t, first(evaluate(r, p, subject, fmt.Sprint("before", used))))
	}
	// untilAllowed evaluates until a decision comes back, and checks that
	// no decision was lost or charged twice on the way.
	untilAllowed := func(when string, within time.Duration, lossAllowed bool) time.Duration {
		t.Helper()
		start := time.Now()
		for i := 0; ; i++ {
			o, _ := evaluate(r, p, subject, fmt.Sprint(when, i))
			if e, ok := o.(limiter.Evaluated); ok {
				used++
				if !e.Allowed || (!lossAllowed && e.Remaining != 100-used) {
					t.Fatalf("%s: %#v, want allowed with %d remaining", when, e.Decision, 100-used)
				}
				return time.Since(start)
			}
			if time.Since(start) > within {
				t.Fatalf("%s: no decision within %v; last outcome %#v", when, within, o)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	t.Run("CLUSTER FAILOVER on the replica: decisions follow it at once, with the count kept", func(t *testing.T) {
		admin := replica.Client(t)
		if err := admin.ClusterFailover(context.Background()).Err(); err != nil {
			t.Fatalf("CLUSTER FAILOVER: %v", err)
		}
		waitRole(t, replica, "master")
		took := untilAllowed("after the failover", 2*time.Second, false)
		t.Logf("first decision %v after the replica said it was master", took)
		threeNodes("after the failover")
	})
	t.Run("a killed master: its replica takes over and decisions resume without a restart", func(t *testing.T) {
		// The replica promoted above is the master now; the old master
		// its replica.
		waitRole(t, master, "slave")
		replica.Kill()
		killed := time.Now()
		o, _ := evaluate(r, p, subject, "while down")
		if _, ok := o.(limiter.Evaluated); ok {
			t.Fatalf("with the master killed: %#v, want no decision", o)
		}
		waitRole(t, master, "master")
		t.Logf("the replica took over %v after the kill", time.Since(killed).Round(time.Millisecond))
		// An asynchronous replica may lack the last writes: the count may
		// have gone back (the bound in docs/redis.md), never forward.
		took := untilAllowed("after the promotion", 5*time.Second, true)
		t.Logf("first decision %v after the promotion", took.Round(time.Millisecond))
		threeNodes("after the promotion")
	})
}

// waitRole waits until s reports role (INFO replication) and, as a master,
// that the cluster is ok.
func waitRole(t *testing.T, s *redistest.Server, role string) {
	t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer cl.Close()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		repl, err := cl.Info(context.Background(), "replication").Result()
		info, _ := cl.ClusterInfo(context.Background()).Result()
		if err == nil && strings.Contains(repl, "role:"+role+"\r\n") && strings.Contains(info, "cluster_state:ok") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never became %s: %v", s.Addr, role, err)
		}
	}
}
