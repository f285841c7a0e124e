package limiter_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
)

// A hot subject under a policy with a lease of 50 costs Redis one call per
// 50 requests, and the remaining the requests see counts down as without
// a lease: the first request's call, then one fetched ahead each time the
// lease is down to half (the last of them for requests yet to come).
func TestRedisLeaseCostsOneCallPerLease(t *testing.T) {
	s := redistest.Start(t)
	reg := prometheus.NewRegistry()
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}, Registerer: reg})
	p := limitertest.Leased(limitertest.FixedWindow(100_000, time.Hour), 50)
	p.Clock = limiter.ClockBackend
	ps := limitertest.One(p)
	subject := limitertest.Subject()
	before, _ := evalshaStats(t, s)
	for i := range 1000 {
		o := r.Evaluate(context.Background(), limiter.Request{Policies: ps, Subject: subject, Cost: 1, EvaluationID: limitertest.Subject()})
		e, ok := o.(limiter.Evaluated)
		if !ok || !e.Allowed {
			t.Fatalf("request %d: %#v", i+1, o)
		}
		if want := int64(100_000 - i - 1); e.Remaining != want {
			t.Fatalf("request %d: remaining %d, want %d", i+1, e.Remaining, want)
		}
	}
	// The last fetch ahead lands in the background.
	for deadline := time.Now().Add(5 * time.Second); metric(t, reg, "gateway_limiter_budget_leases_total").GetCounter().GetValue() < 21 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	after, _ := evalshaStats(t, s)
	if calls := after - before; calls != 21 {
		t.Fatalf("%v script calls for 1000 requests under a lease of 50, want 21", calls)
	}
	if n := metric(t, reg, "gateway_limiter_budget_leases_total").GetCounter().GetValue(); n != 21 {
		t.Fatalf("gateway_limiter_budget_leases_total %v, want 21", n)
	}
	if n := metric(t, reg, "gateway_limiter_budget_lease_admissions_total").GetCounter().GetValue(); n != 999 {
		t.Fatalf("gateway_limiter_budget_lease_admissions_total %v, want 999", n)
	}
}

// A token bucket's lease is spent from until the bucket's next refill,
// not until it would be full again: a drained bucket is far from full,
// and the lease still ends with the period.
func TestRedisTokenBucketLeaseEndsAtTheNextRefill(t *testing.T) {
	s := redistest.Start(t)
	clock := limitertest.NewClock()
	reg := prometheus.NewRegistry()
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}, Clock: clock, Registerer: reg})
	p := limitertest.Leased(limitertest.TokenBucket(100, 1, time.Second), 10)
	ps := limitertest.One(p)
	subject := limitertest.Subject()
	ask := func(cost int64) {
		t.Helper()
		o := r.Evaluate(context.Background(), limiter.Request{Policies: ps, Subject: subject, Cost: cost, EvaluationID: limitertest.Subject()})
		if e, ok := o.(limiter.Evaluated); !ok || !e.Allowed {
			t.Fatalf("outcome %#v", o)
		}
	}
	calls := func() float64 {
		c, _ := evalshaStats(t, s)
		return c
	}
	ask(50) // no lease: the cost is all of it
	ask(1)  // a lease of 9 more
	start := calls()
	clock.Advance(998 * time.Millisecond) // a lease ends a millisecond early, for rounding
	ask(1)
	if n := calls() - start; n != 0 {
		t.Fatalf("%v calls within the period, want the lease to admit", n)
	}
	clock.Advance(2 * time.Millisecond)
	ask(1)
	if n := calls() - start; n != 1 {
		t.Fatalf("%v calls after the refill, want 1: the lease ended with its period", n)
	}
}

// Concurrent requests of a hot subject wait in line for the call in
// flight and are admitted from the lease it takes: a call per 50 requests
// still, every request admitted, none out of time.
func TestRedisLeaseServesConcurrentRequestsInLine(t *testing.T) {
	s := redistest.Start(t)
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
	p := limitertest.Leased(limitertest.FixedWindow(100_000, time.Hour), 50)
	p.Clock = limiter.ClockBackend
	ps := limitertest.One(p)
	subject := limitertest.Subject()
	before, _ := evalshaStats(t, s)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				o := r.Evaluate(context.Background(), limiter.Request{Policies: ps, Subject: subject, Cost: 1,
					EvaluationID: limitertest.Subject(), Deadline: time.Now().Add(limiter.DefaultDeadline)})
				if e, ok := o.(limiter.Evaluated); ok && e.Allowed {
					admitted.Add(1)
				} else {
					t.Errorf("outcome %#v", o)
				}
			}
		}()
	}
	wg.Wait()
	after, _ := evalshaStats(t, s)
	if n := admitted.Load(); n != 6400 {
		t.Fatalf("%d of 6400 admitted", n)
	}
	if calls := after - before; calls > 6400/50+1 {
		t.Fatalf("%v script calls for 6400 requests under a lease of 50, want 128", calls)
	}
}

// A request waiting in line for a call Redis does not answer leaves the
// line at its own deadline, Unavailable, charged nothing, however long the
// call may take; of two waiters, the later with the earlier deadline
// leaves first. The call, answered, admits.
func TestRedisLeaseWaiterLeavesTheLineAtItsDeadline(t *testing.T) {
	s := redistest.Start(t)
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
	p := limitertest.Leased(limitertest.FixedWindow(100, time.Hour), 5)
	p.Clock = limiter.ClockBackend
	ps := limitertest.One(p)
	subject := limitertest.Subject()
	ask := func(within time.Duration) limiter.Outcome {
		return r.Evaluate(context.Background(), limiter.Request{Policies: ps, Subject: subject, Cost: 1,
			EvaluationID: limitertest.Subject(), Deadline: time.Now().Add(within)})
	}
	s.Stop()
	stopped := true
	t.Cleanup(func() {
		if stopped {
			s.Cont()
		}
	})
	first := make(chan limiter.Outcome, 1)
	go func() { first <- ask(time.Minute) }()
	time.Sleep(100 * time.Millisecond) // its call in flight
	late, early := make(chan limiter.Outcome, 1), make(chan limiter.Outcome, 1)
	go func() { late <- ask(800 * time.Millisecond) }()
	time.Sleep(50 * time.Millisecond)
	go func() { early <- ask(200 * time.Millisecond) }()
	var order []string
	for range 2 {
		var o limiter.Outcome
		name := "early"
		select {
		case o = <-early:
		case o = <-late:
			name = "late"
		}
		order = append(order, name)
		if u, ok := o.(limiter.Unavailable); !ok || !errors.Is(u.Err, context.DeadlineExceeded) {
			t.Fatalf("%s waiter: %#v, want Unavailable at its deadline", name, o)
		}
	}
	if order[0] != "early" {
		t.Fatalf("waiters left in the order %v, want the earlier deadline first", order)
	}
	select {
	case o := <-first:
		t.Fatalf("the call ended while Redis was stopped: %#v", o)
	default:
	}
	s.Cont()
	stopped = false
	if e, ok := (<-first).(limiter.Evaluated); !ok || !e.Allowed || e.Remaining != 99 {
		t.Fatalf("the call: %#v, want admitted with 99 left", e)
	}
	if e, ok := ask(time.Minute).(limiter.Evaluated); !ok || !e.Allowed || e.Remaining != 98 {
		t.Fatalf("next: %#v, want admitted from the lease with 98 left", e)
	}
}

// A reset drops the subject's leases: the next request is decided on
// Redis, against the fresh budget, not admitted from units of the budget
// before.
func TestRedisResetDropsTheSubjectsLeases(t *testing.T) {
	s := redistest.Start(t)
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
	p := limitertest.Leased(limitertest.FixedWindow(10, time.Hour), 5)
	p.Clock = limiter.ClockBackend
	req := limiter.Request{Policies: limitertest.One(p), Subject: limitertest.Subject(), Cost: 1}
	remaining := func() int64 {
		t.Helper()
		req.EvaluationID = limitertest.Subject()
		e, ok := r.Evaluate(context.Background(), req).(limiter.Evaluated)
		if !ok || !e.Allowed {
			t.Fatalf("outcome %#v", e)
		}
		return e.Remaining
	}
	remaining()
	if n := remaining(); n != 8 {
		t.Fatalf("remaining %d, want 8", n)
	}
	if err := r.Reset(context.Background(), limiter.Request{Policies: req.Policies, Subject: req.Subject}); err != nil {
		t.Fatal(err)
	}
	if n := remaining(); n != 9 {
		t.Fatalf("remaining %d after the reset, want 9: the lease of the budget before was spent from", n)
	}
}

// A gateway that stops gives its leases' units back: another instance
// can spend them.
func TestRedisCloseGivesTheLeasesBack(t *testing.T) {
	s := redistest.Start(t)
	opts := limiter.RedisOptions{Addrs: []string{s.Addr}}
	stopping, err := limiter.NewRedis(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	other := redistest.NewLimiter(t, opts)
	p := limitertest.Leased(limitertest.FixedWindow(10, time.Hour), 5)
	p.Clock = limiter.ClockBackend
	req := limiter.Request{Policies: limitertest.One(p), Subject: limitertest.Subject(), Cost: 1}
	admitted := func(b interface {
		Evaluate(context.Context, limiter.Request) limiter.Outcome
	}) int {
		n := 0
		for {
			req.EvaluationID = limitertest.Subject()
			if e, ok := b.Evaluate(context.Background(), req).(limiter.Evaluated); !ok || !e.Allowed {
				return n
			}
			n++
		}
	}
	req.EvaluationID = limitertest.Subject()
	if e, ok := stopping.Evaluate(context.Background(), req).(limiter.Evaluated); !ok || !e.Allowed {
		t.Fatal("the first request was refused")
	}
	stopping.Close()
	if n := admitted(other); n != 9 {
		t.Fatalf("the other instance admitted %d after the first stopped, want the 9 left", n)
	}
}

// BenchmarkRedisLeaseParallel is the load harness's gateway-redis-lease
// beside gateway-memory in the limiter alone: 64 requests at once (with
// -cpu 1, a gateway on one core) of one hot subject under a fixed window
// with de-duplication, on Redis with lease = 50 and on the memory
// backend. cpu-µs/op is the process's CPU per decision, redis-server's
// apart; roundtrips/op the script calls per decision.
func BenchmarkRedisLeaseParallel(b *testing.B) {
	s := redistest.Start(b)
	for _, name := range []string{"memory", "redis-lease"} {
		b.Run(name, func(b *testing.B) {
			p := limitertest.FixedWindow(1<<40, time.Hour)
			var backend interface {
				Evaluate(context.Context, limiter.Request) limiter.Outcome
			}
			if name == "memory" {
				m := limiter.NewMemory(limiter.MemoryOptions{})
				defer m.Close()
				backend = m
			} else {
				p = limitertest.Leased(p, 50)
				p.Clock = limiter.ClockBackend
				backend = redistest.NewLimiter(b, limiter.RedisOptions{Addrs: []string{s.Addr}})
			}
			calls, _ := evalshaStats(b, s)
			cpu := cpuTime(b)
			admitInParallel(b, backend, p, []string{limitertest.Subject()}, 64)
			cpu = cpuTime(b) - cpu
			callsAfter, _ := evalshaStats(b, s)
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			b.ReportMetric((callsAfter-calls)/float64(b.N), "roundtrips/op")
		})
	}
}
