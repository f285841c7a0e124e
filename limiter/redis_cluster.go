package limiter

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// evalsha sends one EVALSHA; on NOSCRIPT it loads the scripts and sends once
// more. In a Cluster it follows MOVED (the slot has a new owner) and ASK
// (the slot is being migrated and the key has left) to the node they name,
// and waits a little and sends again on TRYAGAIN (the slot is being
// migrated and the script's keys are split between the two nodes, or not
// all there). Every one of those replies means the script did not run.
//
// cmd is made by script.command. ctx's deadline may be one no timer
// enforces (deadlineCtx): the waits here that end on ctx.Done() take one.
func (r *Redis) evalsha(ctx context.Context, cmd []any) ([]any, error) {
	key := firstKey(cmd)
	var err error
	noscriptRetried, redirects, tryAgains := false, 0, 0
	var redirected *redis.Client // the node a MOVED or ASK named
	asking := false              // the next call is sent after ASKING
	for {
		gen := r.generation()
		c := redirected
		if c == nil {
			if c, err = r.nodeFor(ctx, key); err != nil {
				return nil, err
			}
		}
		start := time.Now()
		var v any
		v, err = r.send(ctx, c, cmd, asking)
		latency := r.m.latencyOK
		if err != nil {
			latency = r.m.latencyError
		}
		latency.Observe(time.Since(start).Seconds())
		switch {
		case err == nil:
			reply, ok := v.([]any)
			if !ok {
				return nil, errMalformedReply
			}
			return reply, nil
		case redis.HasErrorPrefix(err, "NOSCRIPT") && !noscriptRetried:
			noscriptRetried = true
			lctx, cancel := timed(ctx)
			lerr := r.load(lctx, gen)
			cancel()
			if lerr != nil {
				return nil, lerr
			}
		case r.cluster != nil && redirects < maxRedirects && isRedirect(err):
			redirects++
			addr, ask := redirectTarget(err)
			if !ask {
				// The slot map is out of date; until it is reloaded, the
				// reply says where to go.
				r.cluster.ReloadState(ctx)
			}
			target, known := r.clusterNodes.Load(addr)
			if !known {
				r.cluster.ReloadState(ctx)
				return nil, err
			}
			redirected, asking = target.(*redis.Client), ask
		case r.cluster != nil && tryAgains < len(tryAgainPauses) && redis.IsTryAgainError(err):
			pause := tryAgainPauses[tryAgains]
			tryAgains++
			if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < 2*pause {
				return nil, err
			}
			select {
			case <-ctx.Done():
				return nil, err
			case <-time.After(pause):
			}
			// From the slot's owner again: the migration may have moved on.
			redirected, asking, redirects = nil, false, 0
		default:
			if r.cluster != nil && nodeFailed(err) {
				r.reloadSlots()
			}
			return nil, err
		}
	}
}

// maxRedirects bounds the MOVED and ASK replies one call follows: a slot
// that moved and is moving again takes two.
const maxRedirects = 3

// tryAgainPauses are the waits before each new try after TRYAGAIN. A slot
// holds few keys of a subject, which move in one MIGRATE, so the split
// rarely lasts longer than a few milliseconds; a migration held halfway
// for longer is a 503 rather than a wait for the whole deadline.
var tryAgainPauses = []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond}

func isRedirect(err error) bool {
	if _, ok := redis.IsMovedError(err); ok {
		return true
	}
	_, ok := redis.IsAskError(err)
	return ok
}

// redirectTarget is the address a MOVED or ASK names, and whether it was
// ASK.
func redirectTarget(err error) (addr string, ask bool) {
	if addr, ok := redis.IsAskError(err); ok {
		return addr, true
	}
	addr, _ = redis.IsMovedError(err)
	return addr, false
}

// slotReloadGap is the least time between two slot map reloads asked for
// because a node failed.
const slotReloadGap = 100 * time.Millisecond

// reloadSlots asks go-redis to reload the Cluster's slot map in the
// background, at most once per slotReloadGap. A node that fails may have
// lost its slots to a replica; go-redis would otherwise go on sending to
// it until its own periodic reload, a minute later, since a dead node
// sends no MOVED.
func (r *Redis) reloadSlots() {
	now := time.Now().UnixNano()
	last := r.slotsAsked.Load()
	if now-last < int64(slotReloadGap) || !r.slotsAsked.CompareAndSwap(last, now) {
		return
	}
	r.cluster.ReloadState(context.Background())
}

// nodeFor is the client that owns key. In Cluster mode the call goes to
// the slot's master directly, so that go-redis does not re-send it on a
// timeout or a broken connection as its cluster client would.
func (r *Redis) nodeFor(ctx context.Context, key string) (*redis.Client, error) {
	if r.cluster != nil {
		return r.cluster.MasterForKey(ctx, key)
	}
	return r.client.(*redis.Client), nil
}
