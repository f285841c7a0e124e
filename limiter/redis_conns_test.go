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
// the link heals: one dialed before the breaker opened, or while it was
// open. The probe that ends the breaker's cooldown does not run on it:
// Redis answers again, so the probe closes the breaker.
func TestTheBreakersProbeRunsOnAConnectionDialedSinceItOpened(t *testing.T) {
	for _, c := range []struct {
		name        string
		beforeOpens bool // the connection is dialed before the breaker opens
	}{
		{"dialed before the breaker opened", true},
		{"dialed while the breaker was open", false},
	} {
		t.Run(c.name, func(t *testing.T) {
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
			// dialIntoTheHole leaves in the pool a connection dialed for a
			// ping that stopped waiting for it.
			dialIntoTheHole := func() {
				slow.next.Store(true)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
				defer cancel()
				if err := r.Client().Ping(ctx).Err(); err == nil {
					t.Fatal("a ping answered through a black hole")
				}
				for deadline := time.Now().Add(time.Second); r.Client().PoolStats().IdleConns != 1; time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("%d idle connections, want the one dialed for the ping", r.Client().PoolStats().IdleConns)
					}
				}
			}
			mustAllow(t, ask("warm", time.Second))
			link.Blackhole()
			hung := make(chan limiter.Outcome)
			go func() { hung <- ask("hung", 300*time.Millisecond) }()
			time.Sleep(20 * time.Millisecond) // the warm connection is taken
			if c.beforeOpens {
				dialIntoTheHole()
			}
			if o := <-hung; !isFailure(o) {
				t.Fatalf("a call through a black hole: %#v", o)
			}
			if !c.beforeOpens {
				dialIntoTheHole()
			}
			link.Heal()
			clock.Advance(2 * time.Second)
			mustAllow(t, ask("probe", time.Second))
			mustAllow(t, ask("after", time.Second))
		})
	}
}
