package limiter_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/redistest"
)

// A Redis that restarts without persistence comes back empty and says
// nothing; the backend notices the new run_id and counts the restart.
func TestARedisRestartIsCounted(t *testing.T) {
	defer limiter.SetRestartWatchInterval(limiter.SetRestartWatchInterval(20 * time.Millisecond))
	s := redistest.Start(t)
	reg := prometheus.NewRegistry()
	redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}, Registerer: reg})
	restarts := func() float64 { return metric(t, reg, "gateway_redis_restarts_seen_total").GetCounter().GetValue() }
	time.Sleep(100 * time.Millisecond) // a few readings of the first run_id
	if n := restarts(); n != 0 {
		t.Fatalf("%v restarts before any", n)
	}
	s.Restart()
	for deadline := time.Now().Add(5 * time.Second); restarts() < 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the restart was not seen")
		}
	}
}

// The first run_id is read when the backend starts, not one interval
// later: a restart in between is counted too.
func TestARedisRestartSoonAfterStartIsCounted(t *testing.T) {
	defer limiter.SetRestartWatchInterval(limiter.SetRestartWatchInterval(time.Second))
	s := redistest.Start(t)
	admin := s.Client(t)
	reg := prometheus.NewRegistry()
	redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}, Registerer: reg})
	restarts := func() float64 { return metric(t, reg, "gateway_redis_restarts_seen_total").GetCounter().GetValue() }
	// The backend's first INFO, well before its first interval ends: an
	// INFO counted beyond this test's own (a command is counted once it
	// has run, so each read counts the reads before it).
	for asked, deadline := 0, time.Now().Add(900*time.Millisecond); ; time.Sleep(5 * time.Millisecond) {
		if infoCalls(t, admin) > asked {
			break
		}
		asked++
		if time.Now().After(deadline) {
			t.Fatal("no INFO from the backend before its first interval ended")
		}
	}
	s.Restart()
	for deadline := time.Now().Add(5 * time.Second); restarts() < 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the restart was not seen")
		}
	}
}

// infoCalls is how many INFO commands the server has run.
func infoCalls(t *testing.T, c *redis.Client) int {
	t.Helper()
	stats, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(stats, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_info:calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}
