package limiter_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
)

func evaluate(r *limiter.Redis, p *limiter.Policy, subject, id string) (limiter.Outcome, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), limiter.DefaultDeadline)
	defer cancel()
	start := time.Now()
	o := r.Evaluate(ctx, limiter.Request{Policies: limitertest.One(p), Subject: subject, Cost: 1, EvaluationID: id})
	return o, time.Since(start)
}

// evaluateNew is evaluate for an ID never given before, as the gateway's
// own: the limiter looks for no earlier decision under it.
func evaluateNew(r *limiter.Redis, p *limiter.Policy, subject, id string) (limiter.Outcome, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), limiter.DefaultDeadline)
	defer cancel()
	start := time.Now()
	o := r.Evaluate(ctx, limiter.Request{Policies: limitertest.One(p), Subject: subject, Cost: 1, EvaluationID: id, NewID: true})
	return o, time.Since(start)
}

func mustAllow(t *testing.T, o limiter.Outcome) limiter.Decision {
	t.Helper()
	e, ok := o.(limiter.Evaluated)
	if !ok || !e.Allowed {
		t.Fatalf("outcome %#v, want allowed", o)
	}
	return e.Decision
}

func TestRedisACLUserNeverNeedsEval(t *testing.T) {
	s := redistest.Start(t)
	admin := s.Client(t)
	ctx := context.Background()
	users := map[string][]string{
		"no-eval": {"on", ">test-only-fake-password", "~*", "+@all", "-eval", "-eval_ro"},
		// The strict user: EVALSHA, SCRIPT LOAD and PING, HELLO to open a
		// connection, and the commands the scripts run inside Redis.
		"strict": {"on", ">test-only-fake-password", "~rl:*", "-@all", "+evalsha", "+script|load", "+ping", "+hello",
			"+time", "+hmget", "+hset", "+pexpire", "+get", "+set", "+rpush", "+lpop", "+del"},
	}
	for name, rules := range users {
		args := []any{"ACL", "SETUSER", name}
		for _, r := range rules {
			args = append(args, r)
		}
		if err := admin.Do(ctx, args...).Err(); err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) {
			r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}, Username: name, Password: "test-only-fake-password"})
			p := limitertest.FixedWindow(3, time.Minute)
			p.Clock = limiter.ClockBackend
			subject := limitertest.Subject()
			mustAllow(t, first(evaluate(r, p, subject, "a")))
			if err := admin.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if d := mustAllow(t, first(evaluate(r, p, subject, "b"))); d.Remaining != 1 {
				t.Fatalf("after SCRIPT FLUSH remaining %d, want 1", d.Remaining)
			}
			// The negative check: the user may not run the command the
			// gateway never sends. ACL DRYRUN asks without running it.
			verdict, err := admin.Do(ctx, "ACL", "DRYRUN", name, "eval", "return 1", "0").Text()
			if err != nil || verdict == "OK" || !strings.Contains(verdict, "no permissions") {
				t.Fatalf("ACL DRYRUN of the script command as %s: %q, %v; want a refusal", name, verdict, err)
			}
		})
	}
}

func first(o limiter.Outcome, _ time.Duration) limiter.Outcome { return o }

func TestRedisKeysCarryPrefixTTLAndNoIdentity(t *testing.T) {
	s := redistest.Start(t)
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}, KeyPrefix: "edge:"})
	for _, p := range []*limiter.Policy{limitertest.FixedWindow(5, time.Minute), limitertest.SlidingCounter(5, time.Minute), limitertest.TokenBucket(5, 1, time.Second)} {
		p.Clock = limiter.ClockBackend
		mustAllow(t, first(evaluate(r, p, limitertest.Subject(), "id-"+p.Name)))
	}
	admin := s.Client(t)
	keys, err := admin.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var ours int
	for _, k := range keys {
		if strings.Contains(k, "canary") {
			continue
		}
		ours++
		if !strings.HasPrefix(k, "edge:{v1:") || !strings.Contains(k, "}:conf-") {
			t.Errorf("key %q lacks the prefix and hash tag", k)
		}
		if ttl := admin.PTTL(context.Background(), k).Val(); ttl <= 0 {
			t.Errorf("key %q has no TTL (%v)", k, ttl)
		}
	}
	// Per subject: the state, its remembered evaluations in it.
	if ours != 3 {
		t.Fatalf("%d keys, want 3: %v", ours, keys)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "edge:") {
			t.Errorf("canary key %q ignores the prefix", k)
		}
	}
}

func TestRedisStateChecks(t *testing.T) {
	s := redistest.Start(t)
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
	admin := s.Client(t)
	ctx := context.Background()
	t.Run("the redis clock decides by default", func(t *testing.T) {
		p := limitertest.FixedWindow(2, time.Hour)
		p.Clock = limiter.ClockBackend
		subject := limitertest.Subject()
		mustAllow(t, first(evaluate(r, p, subject, "1")))
		mustAllow(t, first(evaluate(r, p, subject, "2")))
		if e, ok := first(evaluate(r, p, subject, "3")).(limiter.Evaluated); !ok || e.Allowed {
			t.Fatalf("third request %#v, want denied", e)
		}
	})
	t.Run("state from the future beyond the bound is clock_unsafe", func(t *testing.T) {
		p := limitertest.TokenBucket(5, 1, time.Second)
		p.Clock = limiter.ClockBackend
		subject := limitertest.Subject()
		mustAllow(t, first(evaluate(r, p, subject, "1")))
		future := time.Now().Add(time.Minute).UnixMilli()
		admin.HSet(ctx, r.Key(p, subject), "t", future, "s", future)
		if o, ok := first(evaluate(r, p, subject, "2")).(limiter.Unavailable); !ok || o.Category != limiter.ClockUnsafe {
			t.Fatalf("outcome %#v, want clock_unsafe", o)
		}
	})
	t.Run("a key of another type is unreadable state", func(t *testing.T) {
		p := limitertest.FixedWindow(5, time.Minute)
		subject := limitertest.Subject()
		admin.Set(ctx, r.Key(p, subject), "not a hash", time.Minute)
		if o, ok := first(evaluate(r, p, subject, "1")).(limiter.Incompatible); !ok || o.Reason != limiter.StateUnreadable {
			t.Fatalf("outcome %#v, want Incompatible(state_unreadable)", o)
		}
	})
}

func TestRedisTopologyMismatchIsAStartupError(t *testing.T) {
	c := redistest.StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := limiter.NewRedis(ctx, limiter.RedisOptions{Mode: limiter.RedisStandalone, Addrs: []string{c.Nodes[0].Addr}, KeyPrefix: "rl:"})
	if err == nil || !strings.Contains(err.Error(), "Cluster node") {
		t.Fatalf("err %v, want a topology error", err)
	}
}

func TestRedisClusterSpreadsKeysOverMasters(t *testing.T) {
	c := redistest.StartCluster(t)
	r := redistest.NewLimiter(t, limiter.RedisOptions{Mode: limiter.RedisCluster, Addrs: c.Addrs(), KeyPrefix: "spread:"})
	// Where the keys go is the point, not how fast: a first request to a
	// node dials it and loads the script, which on a busy machine outlasted
	// the 750ms default deadline.
	evaluate := func(r *limiter.Redis, p *limiter.Policy, subject, id string) (limiter.Outcome, time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		o := r.Evaluate(ctx, limiter.Request{Policies: limitertest.One(p), Subject: subject, Cost: 1, EvaluationID: id})
		return o, time.Since(start)
	}
	for i := 0; i < 12; i++ {
		// A pseudonym covers the operation: each route's subject differs,
		// and the hash tag is the subject.
		subject := limitertest.Subject()
		p := limitertest.FixedWindow(2, time.Minute)
		p.Name = fmt.Sprint("route-", i)
		mustAllow(t, first(evaluate(r, p, subject, fmt.Sprint("a", i))))
		mustAllow(t, first(evaluate(r, p, subject, fmt.Sprint("b", i))))
		if e, ok := first(evaluate(r, p, subject, fmt.Sprint("c", i))).(limiter.Evaluated); !ok || e.Allowed {
			t.Fatalf("route %d: third request %#v, want denied", i, e)
		}
	}
	holding := 0
	for _, n := range c.Nodes {
		keys, _ := n.Client(t).Keys(context.Background(), "spread:{*}:route-*").Result()
		if len(keys) > 0 {
			holding++
		}
	}
	if holding < 2 {
		t.Fatalf("keys on %d masters, want at least 2", holding)
	}
}

func TestRedisFaults(t *testing.T) {
	p := limitertest.FixedWindow(100, time.Minute)
	p.Clock = limiter.ClockBackend

	t.Run("refused connections are unavailable before send, fast", func(t *testing.T) {
		s := redistest.Start(t)
		r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
		s.Kill()
		o, took := evaluate(r, p, limitertest.Subject(), "x")
		if u, ok := o.(limiter.Unavailable); !ok || u.Category != limiter.UnavailableBeforeSend {
			t.Fatalf("outcome %#v, want Unavailable(unavailable_before_send)", o)
		}
		if took > 300*time.Millisecond {
			t.Fatalf("took %v", took)
		}
	})
	t.Run("a server that never answers is indeterminate within the deadline", func(t *testing.T) {
		s := redistest.Start(t)
		proxy := redistest.StartProxy(t, s.Addr)
		r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{proxy.Addr}})
		proxy.Hang()
		o, took := evaluate(r, p, limitertest.Subject(), "x")
		if _, ok := o.(limiter.Indeterminate); !ok {
			t.Fatalf("outcome %#v, want Indeterminate", o)
		}
		if took > limiter.DefaultDeadline+100*time.Millisecond {
			t.Fatalf("took %v against a %v deadline", took, limiter.DefaultDeadline)
		}
	})
	t.Run("killed and restarted: unavailable while down, decided again after", func(t *testing.T) {
		s := redistest.Start(t)
		r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
		subject := limitertest.Subject()
		mustAllow(t, first(evaluate(r, p, subject, "1")))
		s.Kill()
		if _, ok := first(evaluate(r, p, subject, "2")).(limiter.Evaluated); ok {
			t.Fatal("decided while Redis was down")
		}
		s.Restart()
		deadline := time.Now().Add(5 * time.Second)
		for {
			if e, ok := first(evaluate(r, p, subject, "3")).(limiter.Evaluated); ok && e.Allowed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("no decision 5s after the restart")
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	t.Run("SCRIPT FLUSH between requests: the next one is decided, and counted as a reload", func(t *testing.T) {
		s := redistest.Start(t)
		reg := prometheus.NewRegistry()
		r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}, Registerer: reg})
		subject := limitertest.Subject()
		mustAllow(t, first(evaluate(r, p, subject, "1")))
		s.Client(t).ScriptFlush(context.Background())
		if d := mustAllow(t, first(evaluate(r, p, subject, "2"))); d.Remaining != 98 {
			t.Fatalf("remaining %d, want 98", d.Remaining)
		}
		if n, _ := testutil.GatherAndCount(reg, "gateway_redis_noscript_reloads_total"); n != 1 {
			t.Fatalf("reload series %d", n)
		}
	})
	t.Run("a lost reply is retried and charged once", func(t *testing.T) {
		s := redistest.Start(t)
		proxy := redistest.StartProxy(t, s.Addr)
		// No denial cache: its resets subscription would share the proxy,
		// and DropNextReply could drop the SUBSCRIBE reply instead.
		r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{proxy.Addr}, DenialCacheEntries: -1})
		subject := limitertest.Subject()
		mustAllow(t, first(evaluateNew(r, p, subject, "warm")))
		proxy.DropNextReply()
		d := mustAllow(t, first(evaluateNew(r, p, subject, "lost")))
		if proxy.Dropped() != 1 {
			t.Fatal("no reply was dropped")
		}
		if d.Remaining != 98 {
			t.Fatalf("remaining %d after the retry, want 98", d.Remaining)
		}
		if c := s.Client(t).HGet(context.Background(), r.Key(p, subject), "c").Val(); c != "2" {
			t.Fatalf("stored count %q, want 2: the lost call was charged twice", c)
		}
	})
	t.Run("a lost reply without dedup is indeterminate, never retried", func(t *testing.T) {
		s := redistest.Start(t)
		proxy := redistest.StartProxy(t, s.Addr)
		// No denial cache: its resets subscription would share the proxy,
		// and DropNextReply could drop the SUBSCRIBE reply instead.
		r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{proxy.Addr}, DenialCacheEntries: -1})
		q := *p
		q.Dedup = limiter.Dedup{}
		subject := limitertest.Subject()
		mustAllow(t, first(evaluate(r, &q, subject, "warm")))
		proxy.DropNextReply()
		if o := first(evaluate(r, &q, subject, "lost")); !isIndeterminate(o) {
			t.Fatalf("outcome %#v, want Indeterminate", o)
		}
		if c := s.Client(t).HGet(context.Background(), r.Key(&q, subject), "c").Val(); c != "2" {
			t.Fatalf("stored count %q, want 2 (sent once)", c)
		}
	})
	t.Run("a black hole healed: a concurrency policy admits again within 2s", func(t *testing.T) {
		// Healed at the two worst points of the breaker's cycle: as it
		// opens (a whole cooldown to go), and with its probe in the hole
		// (the probe's wait, then a cooldown).
		for _, probeInTheHole := range []bool{false, true} {
			took := admittedAfterAHealedBlackHole(t, probeInTheHole, 2*time.Second)
			t.Logf("probe in the hole %v: admitted %v after it healed", probeInTheHole, took.Round(time.Millisecond))
		}
	})
	t.Run("sentinel failover: decisions resume on the new master", func(t *testing.T) {
		g := redistest.StartSentinel(t)
		r := redistest.NewLimiter(t, limiter.RedisOptions{Mode: limiter.RedisSentinel, Addrs: g.SentinelAddrs(), MasterName: g.MasterName})
		subject := limitertest.Subject()
		mustAllow(t, first(evaluate(r, p, subject, "1")))
		g.Master.Kill()
		deadline := time.Now().Add(30 * time.Second)
		for n := 0; ; n++ {
			o := first(evaluate(r, p, subject, fmt.Sprint("after-", n)))
			if e, ok := o.(limiter.Evaluated); ok && e.Allowed {
				break
			}
			if e, ok := o.(limiter.Evaluated); ok && !e.Allowed {
				t.Fatalf("denied during failover: %#v", o)
			}
			if time.Now().After(deadline) {
				t.Fatalf("no decision 30s after the master died; last %#v", o)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// The sentinel that led the failover knows the new master first;
		// the others learn it from its hello messages.
		promoted := false
		for deadline := time.Now().Add(10 * time.Second); !promoted && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			for _, s := range g.Sentinels {
				c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
				addr, err := c.GetMasterAddrByName(context.Background(), g.MasterName).Result()
				c.Close()
				if err == nil && addr[1] == fmt.Sprint(g.Replica.Port) {
					promoted = true
				}
			}
		}
		if !promoted {
			t.Fatalf("no sentinel names the old replica on %d as master", g.Replica.Port)
		}
	})
}

// Waiting cures a Redis that is not there yet; it does not cure one that
// answers and refuses the configuration.
func TestRedisStartUpTellsAbsenceFromMisconfiguration(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t.Run("unreachable: starts, cannot decide, is not ready", func(t *testing.T) {
		addr := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
		r, err := limiter.NewRedis(ctx, limiter.RedisOptions{Addrs: []string{addr}})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if err := r.Ready(ctx); err == nil || !strings.Contains(err.Error(), "connecting to redis") {
			t.Fatalf("ready: %v", err)
		}
		p := limitertest.FixedWindow(5, time.Minute)
		if o, ok := first(evaluate(r, p, limitertest.Subject(), "a")).(limiter.Unavailable); !ok || o.Category != limiter.UnavailableBeforeSend {
			t.Fatalf("outcome %#v, want Unavailable(unavailable_before_send)", o)
		}
	})
	t.Run("wrong password: a start-up error", func(t *testing.T) {
		s := redistest.Start(t, "--requirepass", "test-only-fake-password")
		if _, err := limiter.NewRedis(ctx, limiter.RedisOptions{Addrs: []string{s.Addr}, Password: "test-only-wrong-password"}); err == nil {
			t.Fatal("started with a wrong password")
		}
	})
	t.Run("an ACL without the script commands: a start-up error", func(t *testing.T) {
		s := redistest.Start(t)
		if err := s.Client(t).Do(ctx, "ACL", "SETUSER", "weak", "on", ">test-only-fake-password", "~*", "+@all", "-evalsha").Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := limiter.NewRedis(ctx, limiter.RedisOptions{Addrs: []string{s.Addr}, Username: "weak", Password: "test-only-fake-password"}); err == nil {
			t.Fatal("started with a user that may not run EVALSHA")
		}
	})
}

// A node that keeps failing is refused at once, so no request waits out
// its deadline on it; after the cooldown one probe finds it healthy again.
func TestTheCircuitBreakerFailsFastAndRecovers(t *testing.T) {
	s := redistest.Start(t)
	proxy := redistest.StartProxy(t, s.Addr)
	reg := prometheus.NewRegistry()
	clock := limitertest.NewClock()
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{proxy.Addr}, Registerer: reg, Clock: clock,
		Breaker: limiter.BreakerOptions{Failures: 3, Cooldown: 2 * time.Second}})
	p := limitertest.FixedWindow(1000, time.Minute)
	p.Clock = limiter.ClockBackend
	subject := limitertest.Subject()
	ask := func(id string, deadline time.Duration) (limiter.Outcome, time.Duration) {
		start := time.Now()
		o := r.Evaluate(context.Background(), limiter.Request{Policies: limitertest.One(p), Subject: subject, Cost: 1, EvaluationID: id, Deadline: start.Add(deadline)})
		return o, time.Since(start)
	}
	mustAllow(t, first(ask("warm", time.Second)))
	proxy.Hang()
	for i := range 3 {
		if o, _ := ask(fmt.Sprint("hung-", i), 100*time.Millisecond); !isFailure(o) {
			t.Fatalf("call %d to a hung Redis: %#v", i, o)
		}
	}
	if v := metric(t, reg, "gateway_limiter_breaker_open").GetGauge().GetValue(); v != 1 {
		t.Fatalf("gateway_limiter_breaker_open %v after 3 failures, want 1", v)
	}
	var took []time.Duration
	for i := range 21 {
		o, d := ask(fmt.Sprint("open-", i), time.Second)
		if u, ok := o.(limiter.Unavailable); !ok || u.Category != limiter.CircuitOpen {
			t.Fatalf("outcome %#v while open, want Unavailable(circuit_open)", o)
		}
		took = append(took, d)
	}
	slices.Sort(took)
	if took[10] > 20*time.Millisecond {
		t.Fatalf("median %v while open, want well under 20ms: %v", took[10], took)
	}
	proxy.Resume()
	clock.Advance(2*time.Second - time.Millisecond)
	if o, _ := ask("early", time.Second); !isFailure(o) {
		t.Fatalf("before the cooldown ended: %#v", o)
	}
	clock.Advance(time.Millisecond)
	mustAllow(t, first(ask("probe", time.Second)))
	mustAllow(t, first(ask("after", time.Second)))
	if v := metric(t, reg, "gateway_limiter_breaker_open").GetGauge().GetValue(); v != 0 {
		t.Fatalf("gateway_limiter_breaker_open %v after recovery, want 0", v)
	}
}

func isFailure(o limiter.Outcome) bool {
	switch o.(type) {
	case limiter.Unavailable, limiter.Indeterminate:
		return true
	}
	return false
}

// With the fallback on, an instance that cannot reach Redis decides alone
// with its share of every budget: ceil(limit / instances).
func TestTheFallbackDecidesWithADividedBudgetWhileRedisIsDown(t *testing.T) {
	s := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := limiter.Open(ctx, limiter.Options{Kind: limiter.KindRedis,
		Redis:    limiter.RedisOptions{Addrs: []string{s.Addr}, KeyPrefix: "fb:"},
		Fallback: limiter.FallbackOptions{Instances: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	p := limitertest.FixedWindow(5, time.Minute)
	p.Clock = limiter.ClockBackend
	subject := limitertest.Subject()
	ask := func(id string) limiter.Decision {
		t.Helper()
		o := b.Evaluate(context.Background(), limiter.Request{Policies: limitertest.One(p), Subject: subject, Cost: 1, EvaluationID: id, Deadline: time.Now().Add(time.Second)})
		e, ok := o.(limiter.Evaluated)
		if !ok {
			t.Fatalf("outcome %#v", o)
		}
		return e.Decision
	}
	if d := ask("up"); !d.Allowed || d.Fallback {
		t.Fatalf("with Redis up: %+v", d)
	}
	s.Kill()
	var admitted []bool
	for i := range 5 {
		d := ask(fmt.Sprint("down-", i))
		if !d.Fallback {
			t.Fatalf("with Redis down, not a fallback decision: %+v", d)
		}
		admitted = append(admitted, d.Allowed)
	}
	if want := []bool{true, true, true, false, false}; !slices.Equal(admitted, want) {
		t.Fatalf("admitted %v, want %v: ceil(5/2) = 3", admitted, want)
	}
}

func isIndeterminate(o limiter.Outcome) bool {
	_, ok := o.(limiter.Indeterminate)
	return ok
}

// admittedAfterAHealedBlackHole black-holes the link to Redis under a
// load of concurrency-limited requests that take and release leases,
// heals it once the node's breaker has opened (and, with probeInTheHole,
// once a probe has gone into the hole after the cooldown), and returns
// how long a request took to be admitted again; more than bound fails the
// test.
func admittedAfterAHealedBlackHole(t *testing.T, probeInTheHole bool, bound time.Duration) time.Duration {
	s := redistest.Start(t)
	link := redistest.StartLink(t, s.Addr, false)
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{link.Addr}})
	p := limitertest.Concurrency(100, 5*time.Second)
	var ids atomic.Int64
	ask := func(subject string) limiter.Outcome {
		ctx, cancel := context.WithTimeout(context.Background(), limiter.DefaultDeadline)
		defer cancel()
		return r.Evaluate(ctx, limiter.Request{Policies: limitertest.One(p), Subject: subject, Cost: 1, EvaluationID: fmt.Sprint("id-", ids.Add(1))})
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var circuitOpen atomic.Bool
	for w := range 4 {
		wg.Go(func() {
			for !stop.Load() {
				o := ask(fmt.Sprint("worker-", w))
				if u, ok := o.(limiter.Unavailable); ok && u.Category == limiter.CircuitOpen {
					circuitOpen.Store(true)
				}
				e, _ := o.(limiter.Evaluated)
				time.Sleep(5 * time.Millisecond)
				e.Admitted().Release()
			}
		})
	}
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	mustAllow(t, ask("warm"))
	link.Blackhole()
	redistest.WaitFor(t, 10*time.Second, "the breaker open", circuitOpen.Load)
	if probeInTheHole {
		// While the breaker is open nothing is sent; the next write into
		// the hole is the probe's.
		swallowed := link.Swallowed()
		redistest.WaitFor(t, 10*time.Second, "a probe in the black hole", func() bool { return link.Swallowed() > swallowed })
	}
	link.Heal()
	return redistest.WaitFor(t, bound, "a request admitted after the black hole healed", func() bool {
		e, ok := ask("after").(limiter.Evaluated)
		e.Admitted().Release()
		return ok && e.Allowed
	})
}
