package limiter_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
)

// Decisions that wait for the same node together share writes, and each is
// still its own decision: exactly the limit is admitted.
func TestConcurrentDecisionsShareWritesAndStayExact(t *testing.T) {
	s := redistest.Start(t)
	// Each reply 20ms late: the calls that arrive while the workers wait
	// queue behind them, however a busy machine schedules the callers.
	link := redistest.StartLink(t, s.Addr, false)
	reg := prometheus.NewRegistry()
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{link.Addr}, Registerer: reg})
	link.Delay(20 * time.Millisecond)
	p := limitertest.FixedWindow(100, time.Minute)
	p.Clock = limiter.ClockBackend
	subject := limitertest.Subject()
	const n = 400
	writesBefore, callsBefore := batches(t, reg)
	var allowed, denied atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			o := r.Evaluate(context.Background(), limiter.Request{Policies: limitertest.One(p), Subject: subject, Cost: 1,
				EvaluationID: "e" + strconv.Itoa(i), Deadline: time.Now().Add(5 * time.Second)})
			switch o := o.(type) {
			case limiter.Evaluated:
				if o.Allowed {
					allowed.Add(1)
				} else {
					denied.Add(1)
				}
			default:
				t.Errorf("outcome %#v", o)
			}
		}()
	}
	close(start)
	wg.Wait()
	if allowed.Load() != 100 || denied.Load() != n-100 {
		t.Fatalf("%d allowed, %d denied; want 100 and %d", allowed.Load(), denied.Load(), n-100)
	}
	writes, calls := batches(t, reg)
	writes, calls = writes-writesBefore, calls-callsBefore
	// The remembered denials answer some requests without Redis.
	if calls < 101 || calls > n {
		t.Fatalf("%v calls sent, want between 101 and %d", calls, n)
	}
	if writes >= calls {
		t.Fatalf("%v writes for %v calls: nothing was batched", writes, calls)
	}
}

// The decisions a batch carries go to Redis as one EVALSHA (in a Cluster,
// one for each subject), each still decided alone: over several subjects
// and routes of one and two policies at once, with de-duplication, every
// subject is admitted exactly its limits, and there were fewer script
// calls than decisions.
func TestBatchedDecisionsShareScriptCallsAndStayExact(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		name := "standalone"
		if cluster {
			name = "cluster"
		}
		t.Run(name, func(t *testing.T) {
			var opts limiter.RedisOptions
			var stats func() float64
			if cluster {
				c := redistest.StartCluster(t)
				opts = limiter.RedisOptions{Mode: limiter.RedisCluster, Addrs: c.Addrs()}
				stats = func() (calls float64) {
					for _, n := range c.Nodes {
						x, _ := evalshaStats(t, n)
						calls += x
					}
					return calls
				}
			} else {
				s := redistest.Start(t)
				opts = limiter.RedisOptions{Addrs: []string{s.Addr}}
				stats = func() float64 { x, _ := evalshaStats(t, s); return x }
			}
			// No remembered denials: every decision goes to Redis.
			opts.DenialCacheEntries = -1
			r := redistest.NewLimiter(t, opts)
			minute := limitertest.FixedWindow(30, time.Minute)
			bucket := limitertest.TokenBucket(20, 1, time.Hour)
			for _, p := range []*limiter.Policy{minute, bucket} {
				p.Clock = limiter.ClockBackend
			}
			routes := [][]*limiter.Policy{{minute}, {minute, bucket}}
			subjects := []string{limitertest.Subject(), limitertest.Subject(), limitertest.Subject()}
			const each = 60 // per subject and route
			before := stats()
			allowed := make([][2]atomic.Int64, len(subjects))
			var wg sync.WaitGroup
			start := make(chan struct{})
			for si, subject := range subjects {
				for ri, ps := range routes {
					for i := range each {
						wg.Add(1)
						go func() {
							defer wg.Done()
							<-start
							o := r.Evaluate(context.Background(), limiter.Request{Policies: limiter.MustPolicySet(ps...), Subject: subject, Cost: 1,
								EvaluationID: subject + "-" + strconv.Itoa(ri) + "-" + strconv.Itoa(i), Deadline: time.Now().Add(5 * time.Second)})
							e, ok := o.(limiter.Evaluated)
							if !ok {
								t.Errorf("outcome %#v", o)
								return
							}
							if e.Allowed {
								allowed[si][ri].Add(1)
							}
						}()
					}
				}
			}
			close(start)
			wg.Wait()
			for si := range subjects {
				// The minute's 30 are shared by both routes; the second
				// route's admissions also take from the bucket's 20.
				one, both := allowed[si][0].Load(), allowed[si][1].Load()
				if one+both != 30 || both > 20 {
					t.Errorf("subject %d: %d admitted on the first route and %d on the second, want 30 in all, at most 20 on the second", si, one, both)
				}
			}
			decisions := float64(len(subjects) * len(routes) * each)
			if calls := stats() - before; calls >= decisions {
				t.Fatalf("%v script calls for %v decisions: none was merged", calls, decisions)
			}
		})
	}
}

// Decisions that queue behind a black hole, more than the batcher's
// queue holds besides the calls its workers carry, end at their own
// deadline, as failures, though the workers wait for calls of a later
// deadline: those until go-redis's read timeout (500 ms), the queued ones
// 50 ms, and so do the ones that waited for room in the queue.
func TestDecisionsBehindABlackHoleEndAtTheirDeadline(t *testing.T) {
	s := redistest.Start(t)
	link := redistest.StartLink(t, s.Addr, false)
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{link.Addr}, Breaker: limiter.BreakerOptions{Disabled: true}})
	p := limitertest.FixedWindow(1<<20, time.Minute)
	evaluate := func(id string, deadline time.Time) limiter.Outcome {
		return r.Evaluate(context.Background(), limiter.Request{Policies: limitertest.One(p), Subject: limitertest.Subject(),
			Cost: 1, EvaluationID: id, Deadline: deadline})
	}
	mustAllow(t, evaluate("warm", time.Now().Add(time.Second)))
	link.Blackhole()
	var wg sync.WaitGroup
	// Calls with 5 s to go hold both workers.
	for i := range 4 {
		wg.Go(func() {
			if o := evaluate("long"+strconv.Itoa(i), time.Now().Add(5*time.Second)); !isFailure(o) {
				t.Errorf("a call through a black hole: %#v", o)
			}
		})
	}
	for link.Swallowed() < 2 {
		time.Sleep(time.Millisecond)
	}
	const n = 600
	var late, answered atomic.Int64
	for i := range n {
		wg.Go(func() {
			start := time.Now()
			o := evaluate("e"+strconv.Itoa(i), start.Add(50*time.Millisecond))
			// Well before the workers are free: the slack is a busy
			// machine's scheduling of 600 callers.
			if time.Since(start) > 350*time.Millisecond {
				late.Add(1)
			}
			if !isFailure(o) {
				answered.Add(1)
			}
		})
	}
	wg.Wait()
	if late.Load() > 0 || answered.Load() > 0 {
		t.Fatalf("of %d decisions of 50 ms behind a black hole, %d took more than 350 ms and %d were answered", n, late.Load(), answered.Load())
	}
}

// batches reads how many writes the batchers made and how many calls they
// carried.
func batches(t testing.TB, reg *prometheus.Registry) (writes, calls float64) {
	t.Helper()
	h := metric(t, reg, "gateway_redis_batch_size").GetHistogram()
	return float64(h.GetSampleCount()), h.GetSampleSum()
}

// A reply lost for a whole batch leaves each of its decisions ambiguous on
// its own; each is retried under its own evaluation ID, and none is
// charged twice.
func TestALostBatchReplyChargesEachDecisionOnce(t *testing.T) {
	s := redistest.Start(t)
	proxy := redistest.StartProxy(t, s.Addr)
	// No denial cache: its resets subscription would share the proxy,
	// and DropNextReply could drop the SUBSCRIBE reply instead.
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{proxy.Addr}, DenialCacheEntries: -1})
	p := limitertest.FixedWindow(1000, time.Minute)
	p.Clock = limiter.ClockBackend
	subject := limitertest.Subject()
	mustAllow(t, first(evaluateNew(r, p, subject, "warm")))
	proxy.DropNextReply()
	const n = 64
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, _ := evaluateNew(r, p, subject, "lost-"+strconv.Itoa(i))
			if e, ok := o.(limiter.Evaluated); !ok || !e.Allowed {
				t.Errorf("outcome %#v, want allowed after a retry", o)
			}
		}()
	}
	wg.Wait()
	if proxy.Dropped() != 1 {
		t.Fatal("no reply was dropped")
	}
	if c := s.Client(t).HGet(context.Background(), r.Key(p, subject), "c").Val(); c != strconv.Itoa(n+1) {
		t.Fatalf("stored count %s, want %d: a decision was charged twice or not at all", c, n+1)
	}
}

// A decision whose key Redis refuses (the wrong type) gets that answer as
// it would alone, and the decisions merged into its call with it are
// decided as usual: a lease set and a state that are strings,
// each under its own subject, among subjects whose keys are sound.
func TestABatchedDecisionsRefusalIsItsOwn(t *testing.T) {
	s := redistest.Start(t)
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}, DenialCacheEntries: -1})
	admin := s.Client(t)
	ctx := context.Background()
	window := limitertest.FixedWindow(1000, time.Minute)
	inFlight := limitertest.Concurrency(1000, time.Minute)
	for _, p := range []*limiter.Policy{window, inFlight} {
		p.Clock = limiter.ClockBackend
	}
	badLeases, badState := limitertest.Subject(), limitertest.Subject()
	admin.Set(ctx, r.Key(inFlight, badLeases)+":l", "not a set", time.Minute)
	admin.Set(ctx, r.Key(window, badState), "not a hash", time.Minute)
	good := []string{limitertest.Subject(), limitertest.Subject()}
	before, _ := evalshaStats(t, s)
	type ask struct {
		subject string
		p       *limiter.Policy
		sound   bool
	}
	var asks []ask
	for range 20 {
		asks = append(asks, ask{badLeases, inFlight, false}, ask{badState, window, false},
			ask{good[0], inFlight, true}, ask{good[1], window, true})
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, a := range asks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			req := limiter.Request{Policies: limitertest.One(a.p), Subject: a.subject, Cost: 1,
				EvaluationID: "e" + strconv.Itoa(i), Deadline: time.Now().Add(5 * time.Second)}
			o := r.Evaluate(ctx, req)
			e, decided := o.(limiter.Evaluated)
			switch {
			case a.sound && (!decided || !e.Allowed):
				t.Errorf("a sound subject: outcome %#v, want allowed", o)
			case !a.sound && decided:
				t.Errorf("a subject whose key is of the wrong type: outcome %#v, want no decision", o)
			case !a.sound:
				if _, ok := o.(limiter.Incompatible); !ok {
					t.Errorf("a subject whose key is of the wrong type: outcome %#v, want Incompatible", o)
				}
			}
			if decided && a.p == inFlight {
				e.Admitted().Release()
			}
		}()
	}
	close(start)
	wg.Wait()
	r.WaitReleases()
	if calls, _ := evalshaStats(t, s); calls-before >= float64(len(asks)) {
		t.Fatalf("%v script calls for %d decisions: none was merged", calls-before, len(asks))
	}
}
