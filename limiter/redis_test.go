package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
)

func newRedis(t testing.TB, opts limiter.RedisOptions) *limiter.Redis {
	t.Helper()
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = "rltest:"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := limiter.NewRedis(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func redisFactory(opts func() limiter.RedisOptions) limitertest.Factory {
	return func(t *testing.T, clock limiter.Clock) limitertest.Backend {
		o := opts()
		o.Clock = clock
		return newRedis(t, o)
	}
}

func TestRedisConformance(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		s := redistest.Start(t)
		limitertest.Run(t, redisFactory(func() limiter.RedisOptions {
			return limiter.RedisOptions{Mode: limiter.RedisStandalone, Addrs: []string{s.Addr}}
		}))
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		limitertest.Run(t, redisFactory(func() limiter.RedisOptions {
			return limiter.RedisOptions{Mode: limiter.RedisCluster, Addrs: c.Addrs()}
		}))
	})
	t.Run("sentinel", func(t *testing.T) {
		g := redistest.StartSentinel(t)
		limitertest.Run(t, redisFactory(func() limiter.RedisOptions {
			return limiter.RedisOptions{Mode: limiter.RedisSentinel, Addrs: g.SentinelAddrs(), MasterName: g.MasterName}
		}))
	})
}
