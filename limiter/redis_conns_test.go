package limiter_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
)

// slowDials makes the client's next dial take a while, so that the call
// that asked for it stops waiting first and the pool keeps the connection.
type slowDials struct{ next atomic.Bool }

func (h *slowDials) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if h.next.Swap(false) {
			time.Sleep(50 * time.Millisecond)
		}
		return next(ctx, network, addr)
	}
}

func (*slowDials) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (*slowDials) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A connection the pool dialed into a black hole for a call that had
// stopped waiting idles in the pool, looking healthy, and stays dead once
// the link heals. The probe that ends the breaker's cooldown does not run
// on it: Redis answers again, so the probe closes the breaker.
func TestTheBreakersProbeRunsOnAConnectionDialedSinceItOpened(t *testing.T) {
	s := redistest.Start(t)
	link := redistest.StartLink(t, s.Addr, false)
	clock := limitertest.NewClock()
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{link.Addr}, Clock: clock,
		Breaker: limiter.BreakerOptions{Failures: 1, Cooldown: 2 * time.Second}})
	slow := &slowDials{}
	r.Client().AddHook(slow)
	p := limitertest.FixedWindow(1000, time.Minute)
	p.Clock = limiter.ClockBackend
	subject := limitertest.Subject()
	ask := func(id string, deadline time.Duration) limiter.Outcome {
		return r.Evaluate(context.Background(), limiter.Request{Policies: limitertest.One(p), Subject: subject,
			Cost: 1, EvaluationID: id, Deadline: time.Now().Add(deadline)})
	}
	mustAllow(t, ask("warm", time.Second))
	link.Blackhole()
	hung := make(chan limiter.Outcome)
	go func() { hung <- ask("hung", 300*time.Millisecond) }()
	time.Sleep(20 * time.Millisecond) // the warm connection is taken
	slow.next.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	if err := r.Client().Ping(ctx).Err(); err == nil {
		t.Fatal("a ping answered through a black hole")
	}
	cancel()
	if o := <-hung; !isFailure(o) {
		t.Fatalf("a call through a black hole: %#v", o)
	}
	if n := r.Client().PoolStats().IdleConns; n != 1 {
		t.Fatalf("%d idle connections after the fault, want the one dialed for the ping", n)
	}
	link.Heal()
	clock.Advance(2 * time.Second)
	mustAllow(t, ask("probe", time.Second))
	mustAllow(t, ask("after", time.Second))
}
