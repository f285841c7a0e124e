package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
)

// NewLimiter builds a Redis limiter backend for a test and closes it at
// cleanup.
func NewLimiter(t testing.TB, opts limiter.RedisOptions) *limiter.Redis {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := limiter.NewRedis(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	// Subscribed before the test begins: what it does to Redis (a reply
	// dropped, the commands counted) is then the test's alone. A Redis
	// not reachable yet subscribes later.
	select {
	case <-r.Subscribed():
	case <-time.After(2 * time.Second):
	}
	return r
}
