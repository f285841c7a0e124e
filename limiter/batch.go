package limiter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// batcher sends the script calls that wait for one Redis node at the same
// moment as one pipeline: one write and one read for all of them, each call
// still its own EVALSHA with its own reply or error, so every decision stays
// independent.
//
// No goroutine stands between a caller and Redis: a caller that finds fewer
// than maxInFlight pipelines in flight sends its own call at once, with any
// that were waiting, on its own goroutine. A caller that finds them all in
// flight queues its call and waits; when a pipeline's replies are in, the
// queue goes out as the next pipeline, from a goroutine started for it. So
// a lone request pays no wait and no hand-off, and one slow reply holds up
// only its own batch.
//
// A batch is sent with the earliest deadline among its calls: none waits
// past its own. A call whose deadline passed while it was queued is not sent.
type batcher struct {
	client *redis.Client
	sizes  prometheus.Observer // calls per write

	mu       sync.Mutex
	queue    []*call // waiting for a pipeline, oldest first
	inFlight int     // pipelines being sent or awaiting replies
	closed   bool
	active   sync.WaitGroup // one per pipeline in flight
}

type call struct {
	ctx   context.Context
	sha   string
	keys  []string
	args  []any
	reply any
	err   error
	done  chan struct{} // nil for the call its own caller sends
}

const (
	// Two pipelines in flight, not four: larger batches, so fewer writes,
	// reads and wake-ups a decision on both sides (go run ./bench at 512
	// connections), and still a second pipeline while one reply is slow.
	maxInFlight = 2
	maxBatch    = 128
)

// errNotSent: the call was never written to Redis.
var errNotSent = errors.New("redis: not sent")

func newBatcher(c *redis.Client, sizes prometheus.Observer) *batcher {
	return &batcher{client: c, sizes: sizes}
}

// evalSha sends one EVALSHA, alone or with others, and waits for its reply.
func (b *batcher) evalSha(ctx context.Context, sha string, keys []string, args []any) (any, error) {
	c := &call{ctx: ctx, sha: sha, keys: keys, args: args}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, fmt.Errorf("%w: %w", errNotSent, redis.ErrClosed)
	}
	if b.inFlight < maxInFlight {
		b.inFlight++
		b.active.Add(1)
		batch := b.take(c)
		b.mu.Unlock()
		b.send(batch)
		b.next()
		return c.reply, c.err
	}
	c.done = make(chan struct{})
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	select {
	case <-c.done:
		return c.reply, c.err
	case <-ctx.Done():
		// A pipeline may have carried it: its effect is unknown.
		return nil, ctx.Err()
	}
}

// take is the next batch: first (nil for none) and the oldest queued
// calls, at most maxBatch in all. Called with mu held.
func (b *batcher) take(first *call) []*call {
	if len(b.queue) == 0 {
		if first == nil {
			return nil
		}
		return []*call{first}
	}
	n := min(len(b.queue), maxBatch-1)
	if first == nil {
		n = min(len(b.queue), maxBatch)
	}
	batch := make([]*call, 0, n+1)
	if first != nil {
		batch = append(batch, first)
	}
	batch = append(batch, b.queue[:n]...)
	clear(b.queue[:n])
	b.queue = b.queue[n:]
	if len(b.queue) == 0 {
		b.queue = b.queue[:0:0]
	}
	return batch
}

// next is called when a pipeline's replies are in: the calls queued
// meanwhile go out from a goroutine of their own, so the caller that sent
// the pipeline is not held up by them; otherwise the pipeline's slot is
// free again.
func (b *batcher) next() {
	b.mu.Lock()
	batch := b.take(nil)
	if batch == nil {
		b.inFlight--
		b.mu.Unlock()
		b.active.Done()
		return
	}
	b.mu.Unlock()
	go func() {
		b.send(batch)
		b.next()
	}()
}

// send writes batch and hands each call its reply; a queued caller is
// woken by done.
func (b *batcher) send(batch []*call) {
	live := batch[:0]
	var deadline time.Time
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.err = fmt.Errorf("%w: %w", errNotSent, err)
			c.finish()
			continue
		}
		if d, ok := c.ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
			deadline = d
		}
		live = append(live, c)
	}
	if len(live) > 0 {
		b.sizes.Observe(float64(len(live)))
	}
	switch len(live) {
	case 0:
		return
	case 1:
		c := live[0]
		c.reply, c.err = b.client.EvalSha(c.ctx, c.sha, c.keys, c.args...).Result()
		c.finish()
		return
	}
	// Not a caller's context: one caller going away must not cancel the
	// others' calls.
	ctx := context.Background()
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	pipe := b.client.Pipeline()
	cmds := make([]*redis.Cmd, len(live))
	for i, c := range live {
		cmds[i] = pipe.EvalSha(ctx, c.sha, c.keys, c.args...)
	}
	pipe.Exec(ctx)
	for i, c := range live {
		c.reply, c.err = cmds[i].Result()
		c.finish()
	}
}

func (c *call) finish() {
	if c.done != nil {
		close(c.done)
	}
}

// close fails the calls still queued (they were never sent) and waits for
// the pipelines in flight to be answered.
func (b *batcher) close() {
	b.mu.Lock()
	b.closed = true
	queued := b.queue
	b.queue = nil
	b.mu.Unlock()
	for _, c := range queued {
		c.err = fmt.Errorf("%w: %w", errNotSent, redis.ErrClosed)
		c.finish()
	}
	b.active.Wait()
}
