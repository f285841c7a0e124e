package limiter_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
)

func redisFactory(opts func() limiter.RedisOptions) limitertest.Factory {
	return func(t *testing.T, clock limiter.Clock) limitertest.Backend {
		o := opts()
		o.Clock = clock
		return redistest.NewLimiter(t, o)
	}
}

// redisInstances makes n backends of the options opts gives, as n
// gateway instances sharing one Redis.
func redisInstances(opts func() limiter.RedisOptions) limitertest.Instances {
	return func(t *testing.T, clock limiter.Clock, n int) []limitertest.Backend {
		bs := make([]limitertest.Backend, n)
		for i := range bs {
			bs[i] = redisFactory(opts)(t, clock)
		}
		return bs
	}
}

func TestRedisConformance(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		s := redistest.Start(t)
		opts := func() limiter.RedisOptions {
			return limiter.RedisOptions{Mode: limiter.RedisStandalone, Addrs: []string{s.Addr}}
		}
		limitertest.Run(t, redisFactory(opts))
		limitertest.RunLeases(t, redisInstances(opts))
		limitertest.RunPenaltiesShared(t, redisInstances(opts))
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		opts := func() limiter.RedisOptions {
			return limiter.RedisOptions{Mode: limiter.RedisCluster, Addrs: c.Addrs()}
		}
		limitertest.Run(t, redisFactory(opts))
		limitertest.RunLeases(t, redisInstances(opts))
		limitertest.RunPenaltiesShared(t, redisInstances(opts))
	})
	t.Run("standalone over TLS", func(t *testing.T) {
		s := redistest.StartTLS(t)
		limitertest.Run(t, redisFactory(func() limiter.RedisOptions {
			return limiter.RedisOptions{Addrs: []string{s.Addr}, TLS: true, TLSCAFile: s.CAFile}
		}))
	})
	t.Run("sentinel", func(t *testing.T) {
		g := redistest.StartSentinel(t)
		limitertest.Run(t, redisFactory(func() limiter.RedisOptions {
			return limiter.RedisOptions{Mode: limiter.RedisSentinel, Addrs: g.SentinelAddrs(), MasterName: g.MasterName}
		}))
	})
}

// evalshaStats reads how many EVALSHA calls the server has run and the
// microseconds of Redis time they took, from INFO commandstats.
func evalshaStats(t testing.TB, s *redistest.Server) (calls, usec float64) {
	return commandStats(t, s, "evalsha")
}

// commandStats reads how many times the server has run command (a
// script's own commands count too) and the microseconds they took, from
// INFO commandstats.
func commandStats(t testing.TB, s *redistest.Server, command string) (calls, usec float64) {
	info := s.Client(t).Info(context.Background(), "commandstats").Val()
	for line := range strings.SplitSeq(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+command+":"); ok {
			for field := range strings.SplitSeq(strings.TrimSpace(rest), ",") {
				k, v, _ := strings.Cut(field, "=")
				switch k {
				case "calls":
					calls, _ = strconv.ParseFloat(v, 64)
				case "usec":
					usec, _ = strconv.ParseFloat(v, 64)
				}
			}
		}
	}
	return calls, usec
}

// A charge within the window whose first charge gave its state key a TTL
// leaves the TTL alone (no PEXPIRE: it would change nothing) when the
// clock is Redis's; a charge in a new window, under the gateway's clock
// or of an algorithm whose TTL moves with each charge (the token bucket)
// renews it.
func TestRedisAChargeWithinItsWindowKeepsTheKeysTTL(t *testing.T) {
	s := redistest.Start(t)
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
	admin := s.Client(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		p     *limiter.Policy
		dedup time.Duration // the records' TTL; 0: de-duplication off
		renew bool          // a second charge in the window renews the TTL
	}{
		{"fixed-window", limitertest.FixedWindow(100, time.Hour), 0, false},
		{"sliding-counter", limitertest.SlidingCounter(100, time.Hour), 0, false},
		{"token-bucket", limitertest.TokenBucket(100, 1, time.Hour), 0, true},
		{"gateway-clock", limitertest.FixedWindow(100, time.Hour), 0, true},
		// The records' TTL is within what the window has left.
		{"fixed-window-remembered", limitertest.FixedWindow(100, time.Hour), 5 * time.Second, false},
		// It is not: the records lengthen the key's TTL.
		{"records-outlive-the-window", limitertest.FixedWindow(100, time.Hour), 3 * time.Hour, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p
			p.Clock = limiter.ClockBackend
			if tc.name == "gateway-clock" {
				p.Clock = limiter.ClockGateway
			}
			p.Dedup = limiter.Dedup{}
			if tc.dedup > 0 {
				p.Dedup = limiter.DefaultDedup
				p.Dedup.TTL = tc.dedup
			}
			subject := limitertest.Subject()
			key := r.Key(p, subject)
			pexpires := func() float64 { n, _ := commandStats(t, s, "pexpire"); return n }
			ids := 0
			charge := func() {
				t.Helper()
				ids++
				mustAllow(t, first(evaluateNew(r, p, subject, fmt.Sprint("id-", ids))))
			}
			// Both charges in one window; the TTL is what it has left.
			clearOfWindowsEnd(t, admin, time.Hour, 5*time.Second)
			before := pexpires()
			charge()
			if n := pexpires() - before; n != 1 {
				t.Fatalf("the first charge sent %v PEXPIRE, want 1", n)
			}
			ttl := admin.PTTL(ctx, key).Val()
			if ttl <= p.CleanupGrace || ttl > max(2*time.Hour+p.CleanupGrace, tc.dedup) {
				t.Fatalf("TTL %v after the first charge, want past the grace and up to the window (two for the sliding counter) and its grace, or the records'", ttl)
			}
			// Shorter than any charge asks: a renewal shows.
			short := min(time.Minute, ttl/2)
			admin.PExpire(ctx, key, short)
			before = pexpires()
			charge()
			n := pexpires() - before
			ttl = admin.PTTL(ctx, key).Val()
			switch {
			case tc.renew && (n != 1 || ttl <= short):
				t.Fatalf("a second charge sent %v PEXPIRE and left the TTL at %v, want it renewed", n, ttl)
			case !tc.renew && (n != 0 || ttl > short):
				t.Fatalf("a second charge in the window sent %v PEXPIRE and left the TTL at %v, want it left alone", n, ttl)
			}
		})
	}
	t.Run("new-window", func(t *testing.T) {
		p := limitertest.FixedWindow(100, time.Second)
		p.Clock = limiter.ClockBackend
		p.Dedup = limiter.Dedup{}
		subject := limitertest.Subject()
		// Early in a window of Redis's clock, so that both charges fall in it.
		now := admin.Time(ctx).Val()
		time.Sleep(now.Truncate(time.Second).Add(time.Second + 50*time.Millisecond).Sub(now))
		mustAllow(t, first(evaluate(r, p, subject, "")))
		if d := mustAllow(t, first(evaluate(r, p, subject, ""))); d.Remaining != 98 {
			t.Fatalf("remaining %d after two charges, want 98", d.Remaining)
		}
		// The next window: its first charge renews the TTL.
		time.Sleep(time.Second)
		before, _ := commandStats(t, s, "pexpire")
		if d := mustAllow(t, first(evaluate(r, p, subject, ""))); d.Remaining != 99 {
			t.Fatalf("remaining %d in the next window, want 99", d.Remaining)
		}
		if n, _ := commandStats(t, s, "pexpire"); n-before != 1 {
			t.Fatalf("the first charge of a window sent %v PEXPIRE, want 1", n-before)
		}
		if ttl := admin.PTTL(ctx, r.Key(p, subject)).Val(); ttl <= p.CleanupGrace {
			t.Fatalf("TTL %v in the new window, want past the grace", ttl)
		}
	})
}

// clearOfWindowsEnd returns when at least margin is left of the window
// (aligned to Redis's clock) that Redis's clock is in, sleeping into the
// next one when less is left, so that a test's charges fall in one window.
func clearOfWindowsEnd(t *testing.T, admin *redis.Client, window, margin time.Duration) {
	t.Helper()
	now, err := admin.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if left := now.Truncate(window).Add(window).Sub(now); left < margin {
		time.Sleep(left + 50*time.Millisecond)
	}
}

func BenchmarkRedis(b *testing.B) {
	s := redistest.Start(b)
	r := redistest.NewLimiter(b, limiter.RedisOptions{Addrs: []string{s.Addr}})
	for _, p := range []*limiter.Policy{
		limitertest.FixedWindow(1<<40, time.Hour),
		limitertest.SlidingCounter(1<<40, time.Hour),
		limitertest.TokenBucket(1<<40, 1, time.Hour),
		// Acquire and release, the release waited for: two calls an op.
		limitertest.Concurrency(1<<20, time.Minute),
	} {
		for _, dedup := range []bool{false, true} {
			q := *p
			q.Clock = limiter.ClockBackend
			name := q.Algorithm.String()
			if dedup {
				name += "/dedup"
			} else {
				q.Dedup = limiter.Dedup{}
			}
			b.Run(name, func(b *testing.B) {
				subject := limitertest.Subject()
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				defer cancel()
				ps := limitertest.One(&q)
				calls, usec := evalshaStats(b, s)
				cpu := cpuTime(b)
				b.ReportAllocs()
				n := 0
				for b.Loop() {
					// The deadline the gateway gives every decision.
					req := limiter.Request{Policies: ps, Subject: subject, Cost: 1, EvaluationID: "e" + strconv.Itoa(n),
						Deadline: time.Now().Add(limiter.DefaultDeadline)}
					o := r.Evaluate(ctx, req)
					e, ok := o.(limiter.Evaluated)
					if !ok || !e.Allowed {
						b.Fatalf("outcome %#v", o)
					}
					if q.HoldsLeases() {
						e.Admitted().Release()
						r.WaitReleases()
					}
					n++
				}
				cpu = cpuTime(b) - cpu
				callsAfter, usecAfter := evalshaStats(b, s)
				b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu-µs/op")
				b.ReportMetric((callsAfter-calls)/float64(n), "roundtrips/op")
				b.ReportMetric((usecAfter-usec)/(callsAfter-calls), "redis-µs/call")
			})
		}
	}
}

// metric is the one series of the metric named name in reg; it fails the
// test when there is not exactly one.
func metric(t testing.TB, reg *prometheus.Registry, name string) *dto.Metric {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0]
		}
	}
	t.Fatalf("no single %s series", name)
	return nil
}

// BenchmarkRedisParallel is many requests at once against one hot key, as
// a busy gateway sends them: what one decision costs the gateway's CPU
// (ns/op on all cores together) and Redis (µs of EVALSHA per decision;
// batched, one EVALSHA carries the decisions of the hot key that share a
// write), and, batched, how many calls shared a write
// (gateway_redis_batch_size): with -cpu 1, as the harness pins the
// gateway, the batches of a gateway on one core.
func BenchmarkRedisParallel(b *testing.B) {
	s := redistest.Start(b)
	for _, batching := range []bool{false, true} {
		name := "one-call-each"
		if batching {
			name = "batched"
		}
		b.Run(name, func(b *testing.B) {
			reg := prometheus.NewRegistry()
			r := redistest.NewLimiter(b, limiter.RedisOptions{Addrs: []string{s.Addr}, DisableBatching: !batching, Registerer: reg})
			p := limitertest.FixedWindow(1<<40, time.Hour)
			p.Clock = limiter.ClockBackend
			subject := limitertest.Subject()
			if !batching {
				reg = nil
			}
			reportRedisCost(b, s, reg, func() { admitInParallel(b, r, p, []string{subject}, 32) })
		})
	}
}

// BenchmarkRedisRotation is the load harness's many-subjects run on Redis:
// BenchmarkRedisParallel's batched decisions, each of the next of 100,000
// subjects in turn, so that no two decisions of a batch share a key. As in
// the harness's rotation, each subject's state is there from its turn
// before (all are decided once first, and the window is an hour) and its
// records are not (they live a second; a turn takes about three).
// Parallelism 32 and 256 make batches of about the harness's sizes at 64
// and 512 connections.
func BenchmarkRedisRotation(b *testing.B) {
	s := redistest.Start(b)
	subjects := make([]string, 100_000)
	for i := range subjects {
		subjects[i] = pseudonym(i)
	}
	p := limitertest.FixedWindow(1<<40, time.Hour)
	p.Clock = limiter.ClockBackend
	p.Dedup.TTL = time.Second
	warm := redistest.NewLimiter(b, limiter.RedisOptions{Addrs: []string{s.Addr}})
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Go(func() {
			for i := w; i < len(subjects); i += 32 {
				warm.Evaluate(context.Background(), limiter.Request{Policies: limitertest.One(p), Subject: subjects[i], Cost: 1})
			}
		})
	}
	wg.Wait()
	for _, parallelism := range []int{32, 256} {
		b.Run(fmt.Sprint("parallelism=", parallelism), func(b *testing.B) {
			reg := prometheus.NewRegistry()
			r := redistest.NewLimiter(b, limiter.RedisOptions{Addrs: []string{s.Addr}, Registerer: reg})
			reportRedisCost(b, s, reg, func() { admitInParallel(b, r, p, subjects, parallelism) })
		})
	}
}

// reportRedisCost runs b.N decisions (run) and reports what each cost:
// redis-server's EVALSHA time (redis-µs/op), its calls (evalsha/op), this
// process's CPU (cpu-µs/op) and, with the batcher's registry reg (nil:
// no batching), the calls that shared a write (calls/write).
func reportRedisCost(b *testing.B, s *redistest.Server, reg *prometheus.Registry, run func()) {
	calls, usec := evalshaStats(b, s)
	var writes, sent float64
	if reg != nil {
		writes, sent = batches(b, reg)
	}
	cpu := cpuTime(b)
	run()
	cpu = cpuTime(b) - cpu
	callsAfter, usecAfter := evalshaStats(b, s)
	b.ReportMetric((usecAfter-usec)/float64(b.N), "redis-µs/op")
	b.ReportMetric((callsAfter-calls)/float64(b.N), "evalsha/op")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
	if reg != nil {
		writesAfter, sentAfter := batches(b, reg)
		b.ReportMetric((sentAfter-sent)/(writesAfter-writes), "calls/write")
	}
}

// cpuTime is the CPU time this process has used (user and system), not
// counting redis-server: what decisions cost the gateway's side.
// admitInParallel has b.N requests of subjects, each the next of them in
// turn, parallelism a core at a time, each with a new evaluation ID of its
// own, as long as the gateway's, and the gateway's deadline, decided by
// backend under p; each must be admitted.
func admitInParallel(b *testing.B, backend interface {
	Evaluate(context.Context, limiter.Request) limiter.Outcome
}, p *limiter.Policy, subjects []string, parallelism int) {
	ps := limitertest.One(p)
	var ids atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(parallelism)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := ids.Add(1)
			o := backend.Evaluate(context.Background(), limiter.Request{Policies: ps, Subject: subjects[id%int64(len(subjects))], Cost: 1,
				EvaluationID: "01cbc7de8bb9222af72d8f9d-" + strconv.FormatInt(id, 36), NewID: true, Deadline: time.Now().Add(limiter.DefaultDeadline)})
			if e, ok := o.(limiter.Evaluated); !ok || !e.Allowed {
				b.Errorf("outcome %#v", o)
				return
			}
		}
	})
}

func cpuTime(t testing.TB) time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		t.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// BenchmarkRedisMemoryPerSubject measures what one subject's keys cost
// Redis (used_memory from INFO memory), for sizing maxmemory: the state
// alone, and the state with the evaluation records de-duplication keeps
// for its TTL, of one decision and of 64.
func BenchmarkRedisMemoryPerSubject(b *testing.B) {
	for _, tc := range []struct {
		name      string
		dedup     bool
		decisions int
	}{
		{"state", false, 1},
		{"state+dedup-record", true, 1},
		{"state+64-dedup-records", true, 64},
	} {
		dedup := tc.dedup
		b.Run(tc.name, func(b *testing.B) {
			s := redistest.Start(b)
			r := redistest.NewLimiter(b, limiter.RedisOptions{Addrs: []string{s.Addr}, DenialCacheEntries: -1})
			p := limitertest.FixedWindow(100, time.Minute)
			p.Clock = limiter.ClockBackend
			// Nothing expires while the benchmark runs.
			p.Dedup.TTL = time.Hour
			if !dedup {
				p.Dedup = limiter.Dedup{}
			}
			used := func() float64 { return float64(s.UsedMemory(b)) }
			before := used()
			n := 0
			ctx := context.Background()
			ps := limitertest.One(p)
			for b.Loop() {
				// A pseudonym as the gateway makes them: v1: and 64 hex digits.
				subject := fmt.Sprintf("v1:%064x", n)
				for i := range tc.decisions {
					r.Evaluate(ctx, limiter.Request{Policies: ps, Subject: subject, Cost: 1, EvaluationID: fmt.Sprintf("%024x-%x", 1, n*tc.decisions+i), NewID: true})
				}
				n++
			}
			b.ReportMetric((used()-before)/float64(n), "redis-bytes/subject")
		})
	}
}
