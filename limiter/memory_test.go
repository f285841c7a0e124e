package limiter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
)

func TestMemoryConformance(t *testing.T) {
	limitertest.Run(t, func(t *testing.T, clock limiter.Clock) limitertest.Backend {
		m := limiter.NewMemory(limiter.MemoryOptions{Clock: clock})
		t.Cleanup(func() { m.Close() })
		return m
	})
}

func TestMemoryEvictsLeastRecentlyUsedWhenFull(t *testing.T) {
	clock := limitertest.NewClock()
	m := limiter.NewMemory(limiter.MemoryOptions{Clock: clock, MaxEntries: 64})
	t.Cleanup(func() { m.Close() })
	p := limitertest.FixedWindow(1, time.Minute)
	for i := 0; i < 1000; i++ {
		m.Evaluate(context.Background(), limiter.Request{Policy: p, Subject: fmt.Sprint("s", i), Cost: 1})
	}
	if n := m.Len(); n > 64 {
		t.Fatalf("%d keys held, cap is 64", n)
	}
	if m.Evictions() == 0 {
		t.Fatal("no eviction counted")
	}
}

func TestMemorySweepDropsExpiredKeys(t *testing.T) {
	clock := limitertest.NewClock()
	m := limiter.NewMemory(limiter.MemoryOptions{Clock: clock})
	t.Cleanup(func() { m.Close() })
	p := limitertest.FixedWindow(1, time.Second)
	p.Dedup = limiter.Dedup{}
	for i := 0; i < 100; i++ {
		m.Evaluate(context.Background(), limiter.Request{Policy: p, Subject: fmt.Sprint("s", i), Cost: 1})
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
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					o := m.Evaluate(ctx, limiter.Request{Policy: &q, Subject: subjects[i%len(subjects)], Cost: 1, EvaluationID: ids[i%len(ids)]})
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
	b.RunParallel(func(pb *testing.PB) {
		s := limitertest.Subject()
		for pb.Next() {
			m.Evaluate(ctx, limiter.Request{Policy: p, Subject: s, Cost: 1})
		}
	})
}
