package limiter_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
)

func TestMemoryConformance(t *testing.T) {
	limitertest.Run(t, func(t *testing.T, clock limiter.Clock) limitertest.Backend {
		m := limiter.NewMemory(limiter.MemoryOptions{Clock: clock})
		t.Cleanup(func() { m.Close() })
		return m
	})
	// The memory backend is exact without leases: n instances sharing its
	// store are the one backend.
	oneStore := func(t *testing.T, clock limiter.Clock, n int) []limitertest.Backend {
		m := limiter.NewMemory(limiter.MemoryOptions{Clock: clock})
		t.Cleanup(func() { m.Close() })
		bs := make([]limitertest.Backend, n)
		for i := range bs {
			bs[i] = m
		}
		return bs
	}
	limitertest.RunLeases(t, oneStore)
	limitertest.RunPenaltiesShared(t, oneStore)
}

func TestMemoryEvictsLeastRecentlyUsedWhenFull(t *testing.T) {
	clock := limitertest.NewClock()
	reg := prometheus.NewRegistry()
	m := limiter.NewMemory(limiter.MemoryOptions{Clock: clock, MaxEntries: 64, Registerer: reg})
	t.Cleanup(func() { m.Close() })
	p := limitertest.FixedWindow(1, time.Minute)
	for i := 0; i < 1000; i++ {
		m.Evaluate(context.Background(), limiter.Request{Policies: limitertest.One(p), Subject: fmt.Sprint("s", i), Cost: 1})
	}
	if n := m.Len(); n > 64 {
		t.Fatalf("%d keys held, cap is 64", n)
	}
	if m.Evictions() == 0 {
		t.Fatal("no eviction counted")
	}
	if n := labeled(t, reg, "gateway_limiter_evictions_total", "result", "evicted"); n != float64(m.Evictions()) {
		t.Fatalf("gateway_limiter_evictions_total{result=\"evicted\"} says %v, the backend %d", n, m.Evictions())
	}
}

// labeled is the value of the counter name's series whose label is value.
func labeled(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if f.GetName() == name && l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{%s=%q}", name, label, value)
	return 0
}

// decidedOrFull is m's decision of req: the zero Evaluated when the table
// had no room for its subject (StoreFull), which only keeper's may not
// meet.
func decidedOrFull(t *testing.T, m *limiter.Memory, req limiter.Request, keeper string) limiter.Evaluated {
	t.Helper()
	switch o := m.Evaluate(context.Background(), req).(type) {
	case limiter.Evaluated:
		return o
	case limiter.Unavailable:
		if o.Category == limiter.StoreFull && req.Subject != keeper {
			return limiter.Evaluated{}
		}
	}
	t.Fatalf("%s: no decision", req.Subject)
	return limiter.Evaluated{}
}

// A full table drops the least recently used keys, but never one that
// holds a live lease: the holder of a concurrency limit of 2 stays at 2
// in flight however many other subjects come and go meanwhile.
func TestMemoryNeverEvictsALiveLease(t *testing.T) {
	m := limiter.NewMemory(limiter.MemoryOptions{MaxEntries: 64})
	t.Cleanup(func() { m.Close() })
	ps := limitertest.One(limitertest.Concurrency(2, time.Minute))
	// A passer-by whose shard holds only the holder's key is refused
	// (store_full): that key is live.
	acquire := func(subject string) limiter.Evaluated {
		t.Helper()
		return decidedOrFull(t, m, limiter.Request{Policies: ps, Subject: subject, Cost: 1, EvaluationID: limitertest.Subject()}, "holder")
	}
	for range 2 {
		if !acquire("holder").Allowed {
			t.Fatal("the holder's first two requests are refused")
		}
	}
	for i := range 400 {
		if e := acquire(fmt.Sprint("passer-by-", i)); e.Allowed {
			e.Admitted().Release()
		}
	}
	if m.Evictions() == 0 {
		t.Fatal("400 subjects in a table of 64 evicted nothing: the test proves nothing")
	}
	for range 2 {
		if e := acquire("holder"); e.Allowed {
			t.Fatal("the holder was admitted over its 2 leases in flight: its key was evicted")
		}
	}
}

// A table whose every key holds live leases refuses a new subject, fails
// closed (StoreFull, a 503 for the gateway), and counts it; the keys held
// stay within the cap.
func TestMemoryFullOfLiveKeysRefusesNewSubjects(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := limiter.NewMemory(limiter.MemoryOptions{MaxEntries: 64, Registerer: reg})
	t.Cleanup(func() { m.Close() })
	ps := limitertest.One(limitertest.Concurrency(1, time.Minute))
	refused := 0
	for i := range 2000 {
		o := m.Evaluate(context.Background(), limiter.Request{Policies: ps, Subject: fmt.Sprint("s", i), Cost: 1, EvaluationID: limitertest.Subject()})
		switch o := o.(type) {
		case limiter.Evaluated:
			if !o.Allowed {
				t.Fatalf("subject %d refused by its own limit: %+v", i, o)
			}
		case limiter.Unavailable:
			if o.Category != limiter.StoreFull {
				t.Fatalf("subject %d: %v, want store_full", i, o.Category)
			}
			refused++
		default:
			t.Fatalf("subject %d: outcome %#v", i, o)
		}
	}
	if refused == 0 || m.Len() > 64 || m.Evictions() != 0 {
		t.Fatalf("%d refused, %d keys held, %d evicted; want refusals, at most 64 keys, no eviction", refused, m.Len(), m.Evictions())
	}
	if n := labeled(t, reg, "gateway_limiter_evictions_total", "result", "refused"); n != float64(refused) {
		t.Fatalf("gateway_limiter_evictions_total{result=\"refused\"} says %v, want %d", n, refused)
	}
}

// A key on which a delayed request's place is reserved is live until the
// place is void: a flood of other subjects does not hand the delayed
// subject a fresh budget.
func TestMemoryNeverEvictsAReservedPlace(t *testing.T) {
	clock := limitertest.NewClock()
	m := limiter.NewMemory(limiter.MemoryOptions{Clock: clock, MaxEntries: 64})
	t.Cleanup(func() { m.Close() })
	p := limitertest.TokenBucket(1, 1, time.Second)
	p.MaxDelay = 2 * time.Second
	ps := limitertest.One(p)
	ask := func(subject string) limiter.Evaluated {
		t.Helper()
		return decidedOrFull(t, m, limiter.Request{Policies: ps, Subject: subject, Cost: 1, EvaluationID: limitertest.Subject(), MayDelay: true}, "held")
	}
	ask("held")
	if e := ask("held"); !e.Allowed || e.Delay() != time.Second {
		t.Fatalf("%+v, want admitted after a second", e)
	}
	for i := range 400 {
		ask(fmt.Sprint("passer-by-", i))
	}
	if m.Evictions() == 0 {
		t.Fatal("400 subjects in a table of 64 evicted nothing: the test proves nothing")
	}
	if e := ask("held"); !e.Allowed || e.Delay() != 2*time.Second {
		t.Fatalf("%+v, want the third request held two seconds behind the reserved one", e)
	}
}

// A key holding the reserves of response-charged requests in flight is
// live until they settle: a flood of other subjects does not hand the
// subject a fresh budget. Settled, even at the reserve (no charge to
// change), it is an ordinary key again, which the table may drop.
func TestMemoryNeverEvictsAKeyWithReservesInFlight(t *testing.T) {
	m := limiter.NewMemory(limiter.MemoryOptions{Clock: limitertest.NewClock(), MaxEntries: 64})
	t.Cleanup(func() { m.Close() })
	p := limitertest.FixedWindow(2, time.Minute)
	p.CostHeader, p.MaxCost = "X-Usage-Cost", 2
	ps := limitertest.One(p)
	ask := func(subject string) limiter.Evaluated {
		t.Helper()
		return decidedOrFull(t, m, limiter.Request{Policies: ps, Subject: subject, Cost: 1, EvaluationID: limitertest.Subject(), NewID: true}, "holder")
	}
	settle := func(e limiter.Evaluated) {
		t.Helper()
		req := e.Admitted().Settlement(0, 1)
		req.EvaluationID, req.NewID = limitertest.Subject(), true
		if _, ok := m.Evaluate(context.Background(), req).(limiter.Evaluated); !ok {
			t.Fatal("a settlement not decided")
		}
	}
	// Requests of other subjects, each settled as its response comes.
	flood := func() {
		t.Helper()
		before := m.Evictions()
		for i := range 400 {
			if e := ask(fmt.Sprint("passer-by-", i, "-", before)); e.Allowed {
				settle(e)
			}
		}
		if m.Evictions() == before {
			t.Fatal("400 subjects in a table of 64 evicted nothing: settled keys are still held")
		}
	}
	var inFlight []limiter.Evaluated
	for range 2 {
		e := ask("holder")
		if !e.Allowed {
			t.Fatal("the holder's first two requests are refused")
		}
		inFlight = append(inFlight, e)
	}
	flood()
	if ask("holder").Allowed {
		t.Fatal("admitted with its whole budget reserved by 2 requests in flight: its key was evicted")
	}
	for _, e := range inFlight {
		settle(e)
	}
	flood()
	if !ask("holder").Allowed {
		t.Fatal("the holder's key outlived its settled reserves through 400 other subjects: still held")
	}
}

// The sweeper keeps time by the backend's clock: moving an injected clock
// past SweepInterval makes a sweep due, and the next evaluation starts it,
// however little real time went by. The wall-clock ticker (an hour here)
// plays no part.
func TestMemorySweepsOnTheInjectedClock(t *testing.T) {
	clock := limitertest.NewClock()
	m := limiter.NewMemory(limiter.MemoryOptions{Clock: clock, SweepInterval: time.Hour})
	t.Cleanup(func() { m.Close() })
	short := limitertest.FixedWindow(1, time.Second)
	short.Dedup = limiter.Dedup{}
	long := limitertest.FixedWindow(1, 24*time.Hour)
	long.Dedup = limiter.Dedup{}
	for i := range 10 {
		m.Evaluate(context.Background(), limiter.Request{Policies: limitertest.One(short), Subject: fmt.Sprint("s", i), Cost: 1})
	}
	if n := m.Len(); n != 10 {
		t.Fatalf("%d keys, want 10", n)
	}
	clock.Advance(time.Hour)
	m.Evaluate(context.Background(), limiter.Request{Policies: limitertest.One(long), Subject: "kept", Cost: 1})
	for deadline := time.Now().Add(10 * time.Second); m.Len() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d keys an hour of the backend's clock after they expired, want 1 (the live one)", m.Len())
		}
	}
	// The next sweep is due an hour later on that clock, and not before:
	// the other key, whose day-long window has ended by then, is swept.
	clock.Advance(24 * time.Hour)
	m.Evaluate(context.Background(), limiter.Request{Policies: limitertest.One(short), Subject: "fresh", Cost: 1})
	for deadline := time.Now().Add(10 * time.Second); m.Len() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d keys after the second sweep was due, want 1 (the fresh one)", m.Len())
		}
	}
}

func TestMemorySweepDropsExpiredKeys(t *testing.T) {
	clock := limitertest.NewClock()
	m := limiter.NewMemory(limiter.MemoryOptions{Clock: clock})
	t.Cleanup(func() { m.Close() })
	p := limitertest.FixedWindow(1, time.Second)
	p.Dedup = limiter.Dedup{}
	for i := 0; i < 100; i++ {
		m.Evaluate(context.Background(), limiter.Request{Policies: limitertest.One(p), Subject: fmt.Sprint("s", i), Cost: 1})
	}
	clock.Advance(time.Second + p.CleanupGrace - time.Millisecond)
	m.Sweep()
	if n := m.Len(); n != 100 {
		t.Fatalf("%d keys before their TTL, want 100", n)
	}
	clock.Advance(time.Millisecond)
	m.Sweep()
	if n := m.Len(); n != 0 {
		t.Fatalf("%d keys after their TTL, want 0", n)
	}
	if m.Evictions() != 0 {
		t.Fatalf("expiry counted as %d evictions", m.Evictions())
	}
}

func TestMemoryEvictsTheLeastRecentlyUsedKeyNotTheOldest(t *testing.T) {
	clock := limitertest.NewClock()
	// Two keys a shard: each new key pushes out the less recently used of
	// the two in its shard.
	m := limiter.NewMemory(limiter.MemoryOptions{Clock: clock, MaxEntries: 128})
	t.Cleanup(func() { m.Close() })
	p := limitertest.FixedWindow(1, time.Minute)
	p.Dedup = limiter.Dedup{}
	kept := limitertest.Subject()
	evaluateMemory(t, m, p, kept, 1, "")
	for i := 0; i < 1000; i++ {
		if d := evaluateMemory(t, m, p, kept, 1, ""); d.Allowed {
			t.Fatalf("after %d other keys the kept key was evicted", i)
		}
		evaluateMemory(t, m, p, limitertest.Subject(), 1, "")
	}
	if m.Evictions() == 0 {
		t.Fatal("no eviction counted")
	}
	if err := m.CheckStructure(); err != nil {
		t.Fatal(err)
	}
}

func TestMemoryKeepsKeysApartThatShareTheFirstHalfOfTheirHash(t *testing.T) {
	// Three keys, the same in the 64 bits the index is keyed by; one of them
	// expires early and is swept, then a fourth comes.
	for short := range 3 {
		t.Run(fmt.Sprint("key ", short, " expires first"), func(t *testing.T) {
			clock := limitertest.NewClock()
			m := limiter.NewMemory(limiter.MemoryOptions{Clock: clock})
			t.Cleanup(func() { m.Close() })
			keys := make([][16]byte, 4)
			policies := make([]*limiter.Policy, 4)
			for k := range keys {
				keys[k] = [16]byte{7, 1, 2, 3, 4, 5, 6, 7, byte(k + 1)}
				policies[k] = limitertest.FixedWindow(10, time.Hour)
				if k == short {
					policies[k].Window = time.Second
				}
			}
			remaining := []int64{10, 10, 10, 10}
			evaluate := func(k int, cost int64) {
				t.Helper()
				o := m.EvaluateKeyed(limiter.Request{Policies: limitertest.One(policies[k]), Subject: "ignored", Cost: cost, EvaluationID: fmt.Sprint(k, "-", remaining[k])}, keys[k])
				remaining[k] -= cost
				if e, ok := o.(limiter.Evaluated); !ok || e.Remaining != remaining[k] {
					t.Fatalf("key %d: got %#v, want %d remaining", k, o, remaining[k])
				}
				if err := m.CheckStructure(); err != nil {
					t.Fatal(err)
				}
			}
			for k := range 3 {
				evaluate(k, int64(k+1))
			}
			clock.Advance(time.Second + policies[short].CleanupGrace)
			m.Sweep()
			if n := m.Len(); n != 2 {
				t.Fatalf("%d keys held after one expired, want 2", n)
			}
			remaining[short] = 10
			for k := range 4 {
				evaluate(k, 1)
			}
			if n := m.Len(); n != 4 {
				t.Fatalf("%d keys held, want 4", n)
			}
		})
	}
}

func TestMemorySlidingCounterForgetsAPreviousWindowThatEnded(t *testing.T) {
	// The memory backend keeps the previous window's count apart from the
	// rest of the state; once it falls to zero it must read as zero.
	clock := limitertest.NewClock()
	m := limiter.NewMemory(limiter.MemoryOptions{Clock: clock})
	t.Cleanup(func() { m.Close() })
	p := limitertest.SlidingCounter(10, time.Second)
	p.Dedup = limiter.Dedup{}
	s := limitertest.Subject()
	for _, step := range []struct {
		advance   time.Duration
		cost      int64
		remaining int64
	}{
		{0, 4, 6},
		{time.Second, 1, 5},     // the four before weigh four
		{2 * time.Second, 1, 9}, // two windows on: nothing before
		{0, 1, 8},               // still nothing before
	} {
		clock.Advance(step.advance)
		if d := evaluateMemory(t, m, p, s, step.cost, ""); !d.Allowed || d.Remaining != step.remaining {
			t.Fatalf("after %v: got %+v, want allowed with %d left", step.advance, d, step.remaining)
		}
	}
}

func TestMemoryRemembersEveryEvaluationOfABusyKeyWithinTheBounds(t *testing.T) {
	for _, tc := range []struct {
		name        string
		dedup       limiter.Dedup
		idLength    int
		evaluations int
		kept        int // the newest evaluations still remembered after them
	}{
		{"max_entries keeps the newest 256", limiter.DefaultDedup, 8, 300, 256},
		{"max_bytes keeps the newest that fit", limiter.Dedup{Enabled: true, TTL: 5 * time.Second, MaxEntries: 256, MaxBytes: 10 * (64 + 36)}, 36, 300, 10},
		{"one evaluation is remembered at least", limiter.Dedup{Enabled: true, TTL: 5 * time.Second, MaxEntries: 1, MaxBytes: 1 << 10}, 8, 300, 1},
		{"a queue indexed as it grows keeps what it held", limiter.DefaultDedup, 8, limiter.RecordsScanned + 4, limiter.RecordsScanned + 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := limitertest.NewClock()
			m := limiter.NewMemory(limiter.MemoryOptions{Clock: clock})
			t.Cleanup(func() { m.Close() })
			p := limitertest.FixedWindow(1000, time.Minute)
			p.Dedup = tc.dedup
			s := limitertest.Subject()
			id := func(i int) string { return fmt.Sprintf("%0*d", tc.idLength, i) }
			n := tc.evaluations
			for i := 0; i < n; i++ {
				if d := evaluateMemory(t, m, p, s, 1, id(i)); d.Remaining != int64(999-i) {
					t.Fatalf("evaluation %d: remaining %d, want %d", i, d.Remaining, 999-i)
				}
			}
			for i := n - tc.kept; i < n; i++ {
				if d := evaluateMemory(t, m, p, s, 1, id(i)); d.Remaining != int64(999-i) {
					t.Fatalf("retry of evaluation %d: remaining %d, want its first result %d", i, d.Remaining, 999-i)
				}
			}
			if forgotten := n - tc.kept - 1; forgotten >= 0 {
				if d := evaluateMemory(t, m, p, s, 1, id(forgotten)); d.Remaining != int64(999-n) {
					t.Fatalf("retry of forgotten evaluation %d: remaining %d, want charged to %d", forgotten, d.Remaining, 999-n)
				}
			}
			if err := m.CheckStructure(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestMemoryForgetsTheEvaluationsOfARemovedKey(t *testing.T) {
	for name, remove := range map[string]func(m *limiter.Memory, clock *limitertest.Clock, p *limiter.Policy){
		"evicted": func(m *limiter.Memory, _ *limitertest.Clock, p *limiter.Policy) {
			for i := 0; i < 1000; i++ {
				evaluateMemory(t, m, p, limitertest.Subject(), 1, "")
			}
		},
		"expired and swept": func(m *limiter.Memory, clock *limitertest.Clock, p *limiter.Policy) {
			clock.Advance(p.Window + p.CleanupGrace)
			m.Sweep()
		},
	} {
		t.Run(name, func(t *testing.T) {
			clock := limitertest.NewClock()
			// One key a shard, so a new key in a shard takes the slot of the
			// key it replaces.
			m := limiter.NewMemory(limiter.MemoryOptions{Clock: clock, MaxEntries: 64})
			t.Cleanup(func() { m.Close() })
			p := limitertest.FixedWindow(1000, time.Second)
			p.Dedup.TTL = time.Hour
			// A short queue of evaluations and a long, indexed one.
			ids := func(i int) []string {
				n := 2
				if i%2 == 1 {
					n = limiter.RecordsScanned + 4
				}
				ids := make([]string, n)
				for j := range ids {
					ids[j] = fmt.Sprint("id-", j)
				}
				return ids
			}
			for i := 0; i < 64; i++ {
				s := limitertest.Subject()
				for _, id := range ids(i) {
					evaluateMemory(t, m, p, s, 2, id)
				}
			}
			remove(m, clock, p)
			for i := 0; i < 200; i++ {
				for _, id := range ids(1) {
					if d := evaluateMemory(t, m, p, limitertest.Subject(), 1, id); d.Remaining != 999 {
						t.Fatalf("a new key got remaining %d for %q, want a fresh budget of 999", d.Remaining, id)
					}
					evaluateMemory(t, m, p, limitertest.Subject(), 1, "")
				}
			}
			if err := m.CheckStructure(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestMemoryKeepsAReusedEvaluationIDsNewerDecision(t *testing.T) {
	// A clock that steps back within the regression bound makes a later
	// evaluation expire before an earlier one, so an expired evaluation can
	// sit behind a live one in the queue while its ID is used again.
	for _, before := range []int{0, limiter.RecordsScanned + 4} { // a short queue, a long one
		t.Run(fmt.Sprint(before, " evaluations before"), func(t *testing.T) {
			clock := limitertest.NewClock()
			m := limiter.NewMemory(limiter.MemoryOptions{Clock: clock})
			t.Cleanup(func() { m.Close() })
			p := limitertest.FixedWindow(100, time.Minute)
			s := limitertest.Subject()
			clock.Advance(10 * time.Second)
			for i := 0; i < before; i++ {
				evaluateMemory(t, m, p, s, 1, fmt.Sprint("before-", i))
			}
			evaluateMemory(t, m, p, s, 1, "y") // remembered until 15s
			clock.Advance(-1500 * time.Millisecond)
			evaluateMemory(t, m, p, s, 1, "x") // remembered until 13.5s
			clock.Advance(5500 * time.Millisecond)
			want := int64(97 - before)
			if d := evaluateMemory(t, m, p, s, 1, "x"); d.Remaining != want {
				t.Fatalf("x after it expired: remaining %d, want charged to %d", d.Remaining, want)
			}
			evaluateMemory(t, m, p, s, 1, "z")
			if d := evaluateMemory(t, m, p, s, 1, "x"); d.Remaining != want {
				t.Fatalf("retry of the second x behind the first: remaining %d, want its result %d", d.Remaining, want)
			}
			clock.Advance(time.Second)
			evaluateMemory(t, m, p, s, 1, "w") // forgets all before z but the second x
			if d := evaluateMemory(t, m, p, s, 1, "x"); d.Remaining != want {
				t.Fatalf("retry of the second x: remaining %d, want its result %d", d.Remaining, want)
			}
			if err := m.CheckStructure(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestMemorySweepForgetsExpiredEvaluationsOfLiveKeys(t *testing.T) {
	clock := limitertest.NewClock()
	m := limiter.NewMemory(limiter.MemoryOptions{Clock: clock})
	t.Cleanup(func() { m.Close() })
	p := limitertest.FixedWindow(100, time.Hour)
	s := limitertest.Subject()
	early := limiter.RecordsScanned + 4 // enough to be indexed
	for i := 0; i < early; i++ {
		evaluateMemory(t, m, p, s, 1, fmt.Sprint("early-", i))
	}
	clock.Advance(p.Dedup.TTL / 2)
	for i := 0; i < 5; i++ {
		evaluateMemory(t, m, p, s, 1, fmt.Sprint("late-", i))
	}
	clock.Advance(p.Dedup.TTL / 2)
	m.Sweep()
	if n := m.Remembered(); n != 5 {
		t.Fatalf("%d evaluations remembered after the first %d expired, want 5", n, early)
	}
	if n := m.Len(); n != 1 {
		t.Fatalf("%d keys held, want 1", n)
	}
	if d, want := evaluateMemory(t, m, p, s, 1, "late-4"), int64(100-early-5); d.Remaining != want {
		t.Fatalf("retry of a live evaluation: remaining %d, want its first result %d", d.Remaining, want)
	}
	if err := m.CheckStructure(); err != nil {
		t.Fatal(err)
	}
	clock.Advance(p.Dedup.TTL)
	m.Sweep()
	if n := m.Remembered(); n != 0 {
		t.Fatalf("%d evaluations remembered after all expired, want 0", n)
	}
	if err := m.CheckStructure(); err != nil {
		t.Fatal(err)
	}
}

func TestMemoryStaysConsistentUnderConcurrentEvictionExpiryAndRetries(t *testing.T) {
	clock := limitertest.NewClock()
	m := limiter.NewMemory(limiter.MemoryOptions{Clock: clock, MaxEntries: 256})
	t.Cleanup(func() { m.Close() })
	policies := []*limiter.Policy{
		limitertest.FixedWindow(50, time.Second),
		limitertest.SlidingCounter(50, time.Second),
		limitertest.TokenBucket(50, 5, 100*time.Millisecond),
	}
	policies[2].Dedup.MaxEntries = 3
	// More keys than fit, and busy enough that some remember more
	// evaluations than are scanned without an index.
	subjects := make([]string, 100)
	for i := range subjects {
		subjects[i] = limitertest.Subject()
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for i := 0; i < 5000; i++ {
				p := policies[rng.IntN(len(policies))]
				id := fmt.Sprint(g, "-", i)
				if rng.IntN(4) == 0 {
					id = fmt.Sprint(g, "-", max(i-rng.IntN(8), 0))
				}
				o := m.Evaluate(context.Background(), limiter.Request{Policies: limitertest.One(p), Subject: subjects[rng.IntN(len(subjects))], Cost: 1, EvaluationID: id})
				// A goroutine that read the clock before others moved it on
				// may find the state further ahead than the bound allows.
				if u, ok := o.(limiter.Unavailable); ok && u.Category == limiter.ClockUnsafe {
					continue
				}
				if _, ok := o.(limiter.Evaluated); !ok {
					t.Errorf("outcome %#v", o)
					return
				}
				switch i % 250 {
				case 0:
					clock.Advance(100 * time.Millisecond)
				case 125:
					m.Sweep()
				}
			}
		}()
	}
	wg.Wait()
	if err := m.CheckStructure(); err != nil {
		t.Fatal(err)
	}
	if m.Len() > 256 {
		t.Fatalf("%d keys held, cap 256", m.Len())
	}
}

func evaluateMemory(t *testing.T, m *limiter.Memory, p *limiter.Policy, subject string, cost int64, id string) limiter.Decision {
	t.Helper()
	o := m.Evaluate(context.Background(), limiter.Request{Policies: limitertest.One(p), Subject: subject, Cost: cost, EvaluationID: id})
	e, ok := o.(limiter.Evaluated)
	if !ok {
		t.Fatalf("outcome %#v, want Evaluated", o)
	}
	return e.Decision
}

func BenchmarkMemory(b *testing.B) {
	for _, p := range []*limiter.Policy{
		limitertest.FixedWindow(1<<40, time.Hour),
		limitertest.SlidingCounter(1<<40, time.Hour),
		limitertest.TokenBucket(1<<40, 1, time.Hour),
	} {
		for _, dedup := range []bool{false, true} {
			name := p.Algorithm.String()
			q := *p
			if !dedup {
				q.Dedup = limiter.Dedup{}
			} else {
				name += "/dedup"
			}
			b.Run(name, func(b *testing.B) {
				m := limiter.NewMemory(limiter.MemoryOptions{})
				defer m.Close()
				subjects := make([]string, 1024)
				for i := range subjects {
					subjects[i] = limitertest.Subject()
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				defer cancel()
				ids := make([]string, 4096)
				for i := range ids {
					ids[i] = fmt.Sprint("eval-", i)
				}
				ps := limitertest.One(&q)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					o := m.Evaluate(ctx, limiter.Request{Policies: ps, Subject: subjects[i%len(subjects)], Cost: 1, EvaluationID: ids[i%len(ids)]})
					if e, ok := o.(limiter.Evaluated); !ok || !e.Allowed {
						b.Fatalf("outcome %#v", o)
					}
					i++
				}
			})
		}
	}
}

func BenchmarkMemoryParallel(b *testing.B) {
	p := limitertest.FixedWindow(1<<40, time.Hour)
	p.Dedup = limiter.Dedup{}
	m := limiter.NewMemory(limiter.MemoryOptions{})
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.ReportAllocs()
	ps := limitertest.One(p)
	b.RunParallel(func(pb *testing.PB) {
		s := limitertest.Subject()
		for pb.Next() {
			m.Evaluate(ctx, limiter.Request{Policies: ps, Subject: s, Cost: 1})
		}
	})
}

// BenchmarkMemoryFreshEvaluations is the gateway's usual traffic: many
// subjects, each asking about once a second with an evaluation ID never seen
// before, so that every decision is remembered, a key holds about five of
// them within the dedup TTL, and none is replayed. The clock is moved by hand
// and the backend is warmed past the TTL, so every run sees the same steady
// state.
func BenchmarkMemoryFreshEvaluations(b *testing.B) {
	const subjects = 100_000
	clock := limitertest.NewClock()
	p := limitertest.FixedWindow(1<<40, time.Hour)
	m := limiter.NewMemory(limiter.MemoryOptions{Clock: clock})
	defer m.Close()
	names := make([]string, subjects)
	for i := range names {
		names[i] = pseudonym(i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	var id []byte
	i := 0
	ps := limitertest.One(p)
	evaluate := func() {
		if i%100 == 0 {
			clock.Advance(100 * time.Second / subjects)
		}
		id = strconv.AppendUint(append(id[:0], "5f0c2a9e4b7d13e8a6c0f921-"...), uint64(i), 36)
		o := m.Evaluate(ctx, limiter.Request{Policies: ps, Subject: names[i%subjects], Cost: 1, EvaluationID: string(id)})
		if e, ok := o.(limiter.Evaluated); !ok || !e.Allowed {
			b.Fatalf("outcome %#v", o)
		}
		i++
	}
	for range 6 * subjects {
		evaluate()
	}
	b.ReportAllocs()
	for b.Loop() {
		evaluate()
	}
}

// BenchmarkMemoryRotation is the load harness's many-subjects run on the
// memory backend: a fixed window without de-duplication, asked for one
// subject again and again (the hot key), or for each of 100,000 held
// subjects in turn, none of whose slot or index entry is in the cache by
// its turn.
func BenchmarkMemoryRotation(b *testing.B) {
	for _, n := range []int{1, 100_000} {
		b.Run(fmt.Sprint("subjects=", n), func(b *testing.B) {
			p := limitertest.FixedWindow(1<<40, time.Hour)
			p.Dedup = limiter.Dedup{}
			m := limiter.NewMemory(limiter.MemoryOptions{})
			defer m.Close()
			names := make([]string, n)
			for i := range names {
				names[i] = pseudonym(i)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			ps := limitertest.One(p)
			i := 0
			evaluate := func() {
				o := m.Evaluate(ctx, limiter.Request{Policies: ps, Subject: names[i%n], Cost: 1})
				if e, ok := o.(limiter.Evaluated); !ok || !e.Allowed {
					b.Fatalf("outcome %#v", o)
				}
				i++
			}
			for range n {
				evaluate()
			}
			b.ReportAllocs()
			for b.Loop() {
				evaluate()
			}
		})
	}
}

// BenchmarkMemoryMillionSubjects measures what one subject costs the memory
// backend: a million distinct pseudonyms, each evaluated once the way the
// gateway does (fixed window, default dedup, a fresh evaluation ID each), and
// the heap still live after a collection, maps included. The clock stands
// still, so every subject still remembers its evaluation when measured.
//
//	go test -run '^$' -bench MillionSubjects -benchtime 1x ./limiter/
func BenchmarkMemoryMillionSubjects(b *testing.B) {
	const subjects = 1_000_000
	p := limitertest.FixedWindow(10, time.Minute)
	clock := limitertest.NewClock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	var before, after runtime.MemStats
	for b.Loop() {
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		// The cap is split over shards; room to spare keeps every subject.
		m := limiter.NewMemory(limiter.MemoryOptions{Clock: clock, MaxEntries: 2 * subjects})
		ps := limitertest.One(p)
		for i := range subjects {
			o := m.Evaluate(ctx, limiter.Request{Policies: ps, Subject: pseudonym(i), Cost: 1, EvaluationID: evaluationID(i)})
			if e, ok := o.(limiter.Evaluated); !ok || !e.Allowed {
				b.Fatalf("subject %d: outcome %#v", i, o)
			}
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		if n := m.Len(); n != subjects {
			b.Fatalf("%d subjects held, want %d", n, subjects)
		}
		m.Close()
		b.StartTimer()
	}
	live := float64(after.HeapAlloc) - float64(before.HeapAlloc)
	b.ReportMetric(live/subjects, "B/subject")
	b.ReportMetric(live/(1<<20), "MiB-live")
	b.ReportMetric(float64(after.HeapAlloc)/(1<<20), "MiB-heap")
}

// pseudonym is the i-th subject in the shape the subject package gives:
// "v1:" and 64 hex digits.
func pseudonym(i int) string {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(i))
	sum := sha256.Sum256(n[:])
	return "v1:" + hex.EncodeToString(sum[:])
}

// evaluationID is shaped like the proxy's: a per-process random prefix and
// a counter in base 36.
func evaluationID(i int) string {
	return "5f0c2a9e4b7d13e8a6c0f921-" + strconv.FormatUint(uint64(i)+1, 36)
}
