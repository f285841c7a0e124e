package limiter

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The calls the Redis backend sends off a request's path (a concurrency
// lease's release, a delayed place given back) wait in one bounded queue
// for a fixed set of workers, each of which sends its call through the
// node's batcher like any other. A hung Redis holds up backgroundWorkers
// goroutines at most, never one per call: a call that finds the queue
// full, or whose deadline (leaseCallTimeout from when it was queued)
// passes before a worker takes it, is dropped and counted in
// gateway_redis_background_dropped_total; what it would have done is
// recovered as for a call that failed (a lease by its expiry).
const (
	backgroundWorkers = 16
	backgroundQueue   = 4096
)

// backgroundCall is one call waiting in the queue.
type backgroundCall struct {
	cmd      []any
	deadline time.Time
	done     func() // after the call, sent or not
	dropped  prometheus.Counter
}

// backgroundCalls are the queue and its workers.
type backgroundCalls struct {
	queue chan backgroundCall
	stop  chan struct{}
}

// Names of the calls sent in the background, gateway_redis_background_dropped_total's
// label.
const (
	callRelease  = "release"
	callGiveBack = "give_back"
)

// startBackground starts the workers; Close stops them.
func (r *Redis) startBackground() {
	r.background = backgroundCalls{queue: make(chan backgroundCall, backgroundQueue), stop: make(chan struct{})}
	for range backgroundWorkers {
		go r.backgroundWorker()
	}
}

// inBackground queues cmd and returns at once; a worker sends it, then
// calls done. Close and WaitReleases wait for it. name says what it is,
// for the count of those dropped.
func (r *Redis) inBackground(name string, cmd []any, done func()) {
	c := backgroundCall{cmd: cmd, deadline: time.Now().Add(leaseCallTimeout), done: done, dropped: r.m.backgroundDropped[name]}
	r.releases.Add(1)
	select {
	case <-r.background.stop:
	default:
		select {
		case r.background.queue <- c:
			return
		default:
		}
	}
	c.dropped.Inc()
	r.releases.Done()
}

func (r *Redis) backgroundWorker() {
	for {
		select {
		case c := <-r.background.queue:
			r.sendBackground(c)
		case <-r.background.stop:
			return
		}
	}
}

// sendBackground sends c unless its deadline has passed, then calls its
// done.
func (r *Redis) sendBackground(c backgroundCall) {
	defer r.releases.Done()
	if time.Until(c.deadline) <= 0 {
		c.dropped.Inc()
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), c.deadline)
	defer cancel()
	r.evalsha(ctx, c.cmd)
	c.done()
}
