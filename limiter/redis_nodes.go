package limiter

import (
	"context"
	"errors"
	"maps"

	"github.com/redis/go-redis/v9"
)

// node is one Redis node's share of the backend.
type node struct {
	batcher *batcher // nil: batching is off
	breaker *breaker // nil: the breaker is off
}

var errCircuitOpen = errors.New("redis: circuit breaker open")

// nodeState is c's node, made on first use.
func (r *Redis) nodeState(c *redis.Client) (*node, error) {
	nodes := r.nodes.Load()
	if nodes == nil {
		return nil, errNotSentClosed
	}
	if n := (*nodes)[c]; n != nil {
		return n, nil
	}
	r.nodesMu.Lock()
	defer r.nodesMu.Unlock()
	nodes = r.nodes.Load()
	if nodes == nil {
		return nil, errNotSentClosed
	}
	if n := (*nodes)[c]; n != nil {
		return n, nil
	}
	n := &node{}
	if r.batching {
		n.batcher = newBatcher(c, &r.script.sha, r.cluster != nil, r.m.batch)
	}
	if !r.breakers.Disabled {
		addr := c.Options().Addr
		if addr == "" || r.mode == RedisSentinel {
			addr = "sentinel-master"
		}
		n.breaker = newBreaker(addr, r.breakers, r.m.breakerOpen.WithLabelValues(addr), r.logger)
	}
	next := make(map[*redis.Client]*node, len(*nodes)+1)
	maps.Copy(next, *nodes)
	next[c] = n
	r.nodes.Store(&next)
	return n, nil
}

// send runs one EVALSHA on node c: refused at once while its breaker is
// open, batched with others unless batching is off. With asking it is sent
// alone, after ASKING on the same connection, as an ASK redirect requires.
func (r *Redis) send(ctx context.Context, c *redis.Client, cmd []any, asking bool) (any, error) {
	n, err := r.nodeState(c)
	if err != nil {
		return nil, err
	}
	if n.breaker != nil && !n.breaker.calm() {
		ok, probe := n.breaker.allow(r.clock.Now())
		if !ok {
			return nil, errCircuitOpen
		}
		if probe {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, BreakerProbeTimeout)
			defer cancel()
		}
	}
	var v any
	shared := false // the batcher counted the node's answer with another call
	switch {
	case asking:
		pipe := c.Pipeline()
		pipe.Do(ctx, "ASKING")
		eval := pipe.Do(ctx, cmd...)
		pipe.Exec(ctx)
		v, err = eval.Result()
	case n.batcher != nil:
		v, shared, err = n.batcher.evalSha(ctx, cmd)
	default:
		v, err = c.Do(ctx, cmd...).Result()
	}
	if n.breaker != nil && !shared {
		if errors.Is(err, context.Canceled) {
			n.breaker.abandon() // a caller that went away says nothing of the node
		} else if ok := !nodeFailed(err); !ok || !n.breaker.calm() {
			n.breaker.record(ok, r.clock.Now())
		}
	}
	return v, err
}

// nodeFailed reports whether a call's error counts against its node: one
// that ends Unavailable or Indeterminate. A script's own error reply (a
// NOSCRIPT, a WRONGTYPE) shows the node answering, and so does a Cluster's
// redirect (MOVED, ASK) or TRYAGAIN while a slot moves.
func nodeFailed(err error) bool {
	if err == nil || redis.HasErrorPrefix(err, "NOSCRIPT") || isRedirect(err) || redis.IsTryAgainError(err) {
		return false
	}
	_, o := classifyRedisError(err)
	switch o.(type) {
	case Unavailable, Indeterminate:
		return true
	}
	return false
}
