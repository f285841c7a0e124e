package limiter

import (
	"context"
	"errors"
	"fmt"
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

// watchRestarts reads the masters' run_id every interval until Close. A
// backend that connected at start-up took its first reading then
// (NewRedis), so that a restart soon after start is seen too; seen holds
// it. In a Cluster each reading also lets go of what the backend held for
// nodes that are no longer masters (pruneNodes).
func (r *Redis) watchRestarts(every time.Duration, seen map[string]string) {
	defer close(r.watchDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-r.stopWatch:
			return
		case <-t.C:
		}
		if err := r.readRunIDs(seen); redis.IsPermissionError(err) {
			r.logger.Info("not watching for Redis restarts: the ACL user may not run INFO")
			return
		}
	}
}

// readRunIDs takes one reading of every master's run_id into seen (node
// address -> run_id) and counts each change.
func (r *Redis) readRunIDs(seen map[string]string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	masters := map[*redis.Client]bool{}
	err := r.eachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		masters[c] = true
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
	if r.cluster != nil && !errors.Is(err, errNoMasters) && len(masters) > 0 {
		r.pruneNodes(masters)
	}
	return err
}

// pruneNodes lets go of the batcher and breaker of every node that is not
// among masters: a master demoted to replica, or a node gone from the
// Cluster, whose client go-redis closes a minute later. A call still
// queued in such a batcher fails as not sent (503); it would have been
// redirected anyway. A node that becomes master again gets a fresh state,
// and its breaker's gauge goes with it.
func (r *Redis) pruneNodes(masters map[*redis.Client]bool) {
	r.nodesMu.Lock()
	nodes := r.nodes.Load()
	if nodes == nil {
		r.nodesMu.Unlock()
		return
	}
	var gone []*node
	next := make(map[*redis.Client]*node, len(*nodes))
	for c, n := range *nodes {
		if masters[c] {
			next[c] = n
		} else {
			gone = append(gone, n)
		}
	}
	if len(gone) > 0 {
		r.nodes.Store(&next)
	}
	r.nodesMu.Unlock()
	kept := map[string]bool{}
	for _, n := range next {
		if n.breaker != nil {
			kept[n.breaker.node] = true
		}
	}
	for _, n := range gone {
		if n.batcher != nil {
			n.batcher.close()
		}
		// A breaker left open would say so for ever.
		if n.breaker != nil && !kept[n.breaker.node] {
			r.m.breakerOpen.DeleteLabelValues(n.breaker.node)
		}
	}
}

// errNoMasters: the Cluster's masters could not be listed.
var errNoMasters = errors.New("redis: no slot map")

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
		if err != nil {
			// No slot map: no list of masters either.
			return fmt.Errorf("%w: %w", errNoMasters, err)
		}
		return first
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
