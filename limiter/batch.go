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
// independent. A call that finds a worker idle is sent at once, alone; calls
// that arrive while pipelines are in flight go out together in the next. A
// few pipelines may be in flight at once, so one slow reply holds up only
// its own batch.
//
// A batch is sent with the earliest deadline among its calls: none waits
// past its own. A call whose deadline passed while it was queued is not sent.
type batcher struct {
	client *redis.Client
	sizes  prometheus.Observer // calls per write
	queue  chan *call
	stop   chan struct{}
	wg     sync.WaitGroup
}

type call struct {
	ctx   context.Context
	sha   string
	keys  []string
	args  []any
	reply any
	err   error
	done  chan struct{}
}

const (
	batchWorkers = 4
	maxBatch     = 128
)

// errNotSent: the call was never written to Redis.
var errNotSent = errors.New("redis: not sent")

func newBatcher(c *redis.Client, sizes prometheus.Observer) *batcher {
	b := &batcher{client: c, sizes: sizes, queue: make(chan *call, 4*maxBatch), stop: make(chan struct{})}
	b.wg.Add(batchWorkers)
	for range batchWorkers {
		go b.work()
	}
	return b
}

// evalSha sends one EVALSHA through the batcher and waits for its reply.
func (b *batcher) evalSha(ctx context.Context, sha string, keys []string, args []any) (any, error) {
	c := &call{ctx: ctx, sha: sha, keys: keys, args: args, done: make(chan struct{})}
	select {
	case b.queue <- c:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", errNotSent, ctx.Err())
	case <-b.stop:
		return nil, redis.ErrClosed
	}
	select {
	case <-c.done:
		return c.reply, c.err
	case <-ctx.Done():
		// A worker may have sent it: its effect is unknown.
		return nil, ctx.Err()
	}
}

func (b *batcher) work() {
	defer b.wg.Done()
	batch := make([]*call, 0, maxBatch)
	cmds := make([]*redis.Cmd, 0, maxBatch)
	for {
		select {
		case c := <-b.queue:
			batch = append(batch[:0], c)
		case <-b.stop:
			return
		}
	more:
		for len(batch) < maxBatch {
			select {
			case c := <-b.queue:
				batch = append(batch, c)
			default:
				break more
			}
		}
		cmds = b.send(batch, cmds[:0])
	}
}

func (b *batcher) send(batch []*call, cmds []*redis.Cmd) []*redis.Cmd {
	live := batch[:0]
	var deadline time.Time
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.err = fmt.Errorf("%w: %w", errNotSent, err)
			close(c.done)
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
		return cmds
	case 1:
		c := live[0]
		c.reply, c.err = b.client.EvalSha(c.ctx, c.sha, c.keys, c.args...).Result()
		close(c.done)
		return cmds
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
	for _, c := range live {
		cmds = append(cmds, pipe.EvalSha(ctx, c.sha, c.keys, c.args...))
	}
	pipe.Exec(ctx)
	for i, c := range live {
		c.reply, c.err = cmds[i].Result()
		cmds[i] = nil
		close(c.done)
	}
	return cmds
}

// close stops the workers once their pipelines are answered; calls still
// queued were never sent and fail as such.
func (b *batcher) close() {
	close(b.stop)
	b.wg.Wait()
	for {
		select {
		case c := <-b.queue:
			c.err = fmt.Errorf("%w: %w", errNotSent, redis.ErrClosed)
			close(c.done)
		default:
			return
		}
	}
}
