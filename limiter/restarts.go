package limiter

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Redis that restarts without persistence comes back empty: every
// subject it held gets a fresh budget, and nothing in a reply says so. Its
// run_id (INFO server) changes on every restart, though, so the backend
// reads it now and then and counts each change it sees
// (gateway_redis_restarts_seen_total) with a warning in the log.

// restartWatchInterval is a variable for the tests.
var restartWatchInterval = 5 * time.Second

func (r *Redis) watchRestarts(every time.Duration) {
	defer close(r.watchDone)
	seen := map[string]string{} // node address -> run_id
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-r.stopWatch:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := r.eachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			info, err := c.Info(ctx, "server").Result()
			if err != nil {
				return err
			}
			id := infoField(info, "run_id")
			addr := c.Options().Addr
			if old, ok := seen[addr]; ok && old != id && id != "" {
				r.m.restarts.Inc()
				r.logger.Warn("redis restarted: its run_id changed; without persistence every subject it held has a fresh budget",
					"node", addr)
			}
			seen[addr] = id
			return nil
		})
		cancel()
		if redis.IsPermissionError(err) {
			r.logger.Info("not watching for Redis restarts: the ACL user may not run INFO")
			return
		}
	}
}

// eachMaster runs fn on every master: the one of standalone and Sentinel,
// each of a Cluster.
func (r *Redis) eachMaster(ctx context.Context, fn func(context.Context, *redis.Client) error) error {
	if r.cluster != nil {
		var mu sync.Mutex
		var first error
		err := r.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			if err := fn(ctx, c); err != nil && first == nil {
				first = err
			}
			return nil
		})
		if first != nil {
			return first
		}
		return err
	}
	return fn(ctx, r.client.(*redis.Client))
}

// infoField is one "name:value" line of an INFO reply.
func infoField(info, name string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
