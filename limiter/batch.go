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
// The deadline reaches go-redis as the socket's (see deadlineCtx); the one
// timer a call has is its caller's, which stops waiting at the deadline
// whatever the worker is doing.
type batcher struct {
	client *redis.Client
	sizes  prometheus.Observer // calls per write
	queue  chan *call
	stop   chan struct{}
	wg     sync.WaitGroup
}

// call is one EVALSHA waiting for its reply. Calls are reused: a caller
// that read its reply puts its call back; one that stopped waiting (its
// deadline, its client gone) leaves it to the worker and the collector.
type call struct {
	ctx   context.Context
	cmd   []any // see script.command
	reply any
	err   error
	done  chan struct{} // the worker's one send, buffered
}

var calls = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// finish hands c's reply to its caller; the worker must not touch c after.
func (c *call) finish() { c.done <- struct{}{} }

// timers hold the callers' deadline timers, stopped between uses.
var timers sync.Pool

func startTimer(d time.Duration) *time.Timer {
	if t, ok := timers.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

func stopTimer(t *time.Timer) {
	t.Stop()
	timers.Put(t)
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

// evalSha sends one EVALSHA through the batcher and waits for its reply,
// no longer than ctx's deadline.
func (b *batcher) evalSha(ctx context.Context, cmd []any) (any, error) {
	var expired <-chan time.Time
	if d, ok := ctx.Deadline(); ok {
		t := startTimer(time.Until(d))
		defer stopTimer(t)
		expired = t.C
	}
	c := calls.Get().(*call)
	c.ctx, c.cmd = ctx, cmd
	select {
	case b.queue <- c:
	case <-ctx.Done():
		c.ctx, c.cmd = nil, nil
		calls.Put(c)
		return nil, fmt.Errorf("%w: %w", errNotSent, ctx.Err())
	case <-expired:
		c.ctx, c.cmd = nil, nil
		calls.Put(c)
		return nil, fmt.Errorf("%w: %w", errNotSent, context.DeadlineExceeded)
	case <-b.stop:
		c.ctx, c.cmd = nil, nil
		calls.Put(c)
		return nil, redis.ErrClosed
	}
	select {
	case <-c.done:
		reply, err := c.reply, c.err
		*c = call{done: c.done}
		calls.Put(c)
		return reply, err
	case <-ctx.Done():
		// A worker may have sent it: its effect is unknown.
		return nil, ctx.Err()
	case <-expired:
		return nil, context.DeadlineExceeded
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
		return cmds
	case 1:
		c := live[0]
		c.reply, c.err = b.client.Do(c.ctx, c.cmd...).Result()
		c.finish()
		return cmds
	}
	// Not a caller's context: one caller going away must not cancel the
	// others' calls.
	ctx := withDeadline(context.Background(), deadline)
	pipe := b.client.Pipeline()
	for _, c := range live {
		cmds = append(cmds, pipe.Do(ctx, c.cmd...))
	}
	pipe.Exec(ctx)
	for i, c := range live {
		c.reply, c.err = cmds[i].Result()
		cmds[i] = nil
		c.finish()
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
			c.finish()
		default:
			return
		}
	}
}
