package limiter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// batcher sends the script calls that wait for one Redis node at the same
// moment as one pipeline: one write and one read for all of them. The
// rate-limit script's calls go as one EVALSHA whose reply carries each
// decision's reply or error (lua/driver.lua), in a Cluster one for each
// set of keys (one subject's route, so one slot): each key is read and
// written once for all of them, and each decided as if alone after the
// ones before it. Every other call is its own EVALSHA with its own reply
// or error. A call that finds a worker idle is
// sent at once, alone; calls that arrive while pipelines are in flight go
// out together in the next. Two pipelines may be in flight at once
// (batchWorkers), so one slow reply holds up only its own batch; four
// made twice the writes for the same gateway CPU and Redis time a request
// (bench/README.md, "Main mode").
//
// A batch is sent with the earliest deadline among its calls: none waits
// past its own. A call whose deadline passed while it was queued is not sent.
// The deadline reaches go-redis as the socket's (see deadlineCtx); the one
// timer a call has is its own, which ends the caller's wait at the
// deadline whatever the worker is doing. The caller waits on its call
// alone, not on its context's end as well: one channel to wait on instead
// of three, whose select cost the gateway about 2 µs a decision. A caller
// whose client went away thus waits for the reply, no longer than the
// deadline; a call not yet sent is not sent.
type batcher struct {
	client *redis.Client
	merge  *string             // the SHA of the script whose calls are merged
	bySlot bool                // merged only over the same keys (Cluster)
	sizes  prometheus.Observer // calls per write
	queue  chan *call
	stop   chan struct{}
	wg     sync.WaitGroup
}

// call is one EVALSHA waiting for its reply. Calls are reused: a caller
// that read its reply puts its call back; one whose deadline ended its
// wait leaves it to the worker and the collector.
type call struct {
	ctx   context.Context
	cmd   []any // see script.command
	reply any
	err   error
	// shared: the call went in a merged command, not first, so the node
	// answered it with the first (a lost reply is one failure of the
	// node's, not one for each decision the command carried).
	shared bool
	// ended: the reply, or the deadline's end, was handed to the caller;
	// whichever of the worker and the timer comes second leaves the call
	// alone.
	ended atomic.Bool
	// expired: the timer ended the wait.
	expired bool
	timer   *time.Timer   // expire at the caller's deadline, stopped between uses
	done    chan struct{} // the one send of finish or expire, buffered
}

var calls = sync.Pool{New: func() any {
	c := &call{done: make(chan struct{}, 1)}
	c.timer = time.AfterFunc(time.Hour, c.expire)
	c.timer.Stop()
	return c
}}

// finish hands the reply to c's caller, unless its deadline has; the
// worker must not touch c after.
func (c *call) finish(reply any, shared bool, err error) {
	if c.ended.CompareAndSwap(false, true) {
		c.reply, c.shared, c.err = reply, shared, err
		c.done <- struct{}{}
	}
}

// release gives c to the next caller: only one whose worker and timer are
// done with it.
func (c *call) release() {
	c.ctx, c.cmd, c.reply, c.err, c.shared, c.expired = nil, nil, nil, nil, false, false
	c.ended.Store(false)
	calls.Put(c)
}

// expire ends the caller's wait at its deadline, unless the reply has.
func (c *call) expire() {
	if c.ended.CompareAndSwap(false, true) {
		c.expired = true
		c.done <- struct{}{}
	}
}

const (
	batchWorkers = 2
	maxBatch     = 128
)

// errNotSent: the call was never written to Redis.
var errNotSent = errors.New("redis: not sent")

// The errors of calls not sent for the causes a batch meets, made once: a
// worker that finds many calls past their deadline formats none of them.
var (
	errNotSentDeadline = fmt.Errorf("%w: %w", errNotSent, context.DeadlineExceeded)
	errNotSentCanceled = fmt.Errorf("%w: %w", errNotSent, context.Canceled)
	errNotSentClosed   = fmt.Errorf("%w: %w", errNotSent, redis.ErrClosed)
)

// notSent is errNotSent for cause.
func notSent(cause error) error {
	switch cause {
	case context.DeadlineExceeded:
		return errNotSentDeadline
	case context.Canceled:
		return errNotSentCanceled
	case redis.ErrClosed:
		return errNotSentClosed
	}
	return fmt.Errorf("%w: %w", errNotSent, cause)
}

func newBatcher(c *redis.Client, merge *string, bySlot bool, sizes prometheus.Observer) *batcher {
	b := &batcher{client: c, merge: merge, bySlot: bySlot, sizes: sizes, queue: make(chan *call, 4*maxBatch), stop: make(chan struct{})}
	b.wg.Add(batchWorkers)
	for range batchWorkers {
		go b.work()
	}
	return b
}

// evalSha sends one EVALSHA through the batcher and waits for its reply,
// no longer than ctx's deadline; shared: the node's answer to it stood
// for other calls' too, and was counted with the first of them (call).
func (b *batcher) evalSha(ctx context.Context, cmd []any) (reply any, shared bool, err error) {
	c := calls.Get().(*call)
	c.ctx, c.cmd = ctx, cmd
	d, bounded := ctx.Deadline()
	if bounded {
		left := time.Until(d)
		if left <= 0 {
			c.release()
			return nil, false, errNotSentDeadline
		}
		c.timer.Reset(left)
	}
	select {
	case b.queue <- c:
	default:
		if err := b.enqueue(c); err != nil {
			return nil, false, err
		}
	}
	select {
	case <-b.stop:
		// Queued after close's drain, perhaps: no worker may take it.
		b.drain()
	default:
	}
	if bounded {
		<-c.done
	} else {
		// (No deadline, no timer: the wait ends with the context too.)
		select {
		case <-c.done:
		case <-ctx.Done():
			// A worker may have sent it: its effect is unknown.
			return nil, false, ctx.Err()
		}
	}
	if c.expired {
		// A worker may have sent it: its effect is unknown.
		return nil, false, context.DeadlineExceeded
	}
	reply, shared, err = c.reply, c.shared, c.err
	// A timer that fired as the reply came may still look at the call.
	if !bounded || c.timer.Stop() {
		c.release()
	}
	return reply, shared, err
}

// enqueue waits for room in the queue for c, no longer than the call's
// wait; a call it does not queue is not sent.
func (b *batcher) enqueue(c *call) error {
	select {
	case b.queue <- c:
		return nil
	case <-c.done: // its deadline
		return errNotSentDeadline
	case <-c.ctx.Done():
		c.expire() // (the call is not reused: its timer may fire yet)
		return notSent(c.ctx.Err())
	case <-b.stop:
		c.expire()
		return errNotSentClosed
	}
}

func (b *batcher) work() {
	defer b.wg.Done()
	batch := make([]*call, 0, maxBatch)
	var w sending
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
		b.send(batch, &w)
	}
}

// sending is a worker's scratch space for one batch: its calls by
// command, each of one call or of merged calls, the commands, and the
// arguments of the merged ones (go-redis is done with a command's
// arguments once it has read the reply).
type sending struct {
	groups [][]*call
	cmds   []*redis.Cmd
	merged [][]any
}

func (b *batcher) send(batch []*call, w *sending) {
	live := batch[:0]
	var deadline time.Time
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.finish(nil, false, notSent(err))
			continue
		}
		if d, ok := c.ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
			deadline = d
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	b.sizes.Observe(float64(len(live)))
	if len(live) == 1 {
		c := live[0]
		reply, err := b.client.Do(c.ctx, c.cmd...).Result()
		c.finish(reply, false, err)
		return
	}
	b.group(live, w)
	// Not a caller's context: one caller going away must not cancel the
	// others' calls.
	ctx, bounded := withDeadline(context.Background(), deadline)
	defer bounded.release()
	w.cmds = w.cmds[:0]
	if len(w.groups) == 1 {
		// One command, merged: no pipeline to make.
		w.cmds = append(w.cmds, b.client.Do(ctx, w.merge(0)...))
	} else {
		pipe := b.client.Pipeline()
		for i, calls := range w.groups {
			if len(calls) == 1 {
				w.cmds = append(w.cmds, pipe.Do(ctx, calls[0].cmd...))
			} else {
				w.cmds = append(w.cmds, pipe.Do(ctx, w.merge(i)...))
			}
		}
		pipe.Exec(ctx)
	}
	for i, cmd := range w.cmds {
		calls := w.groups[i]
		reply, err := cmd.Result()
		w.cmds[i] = nil
		if len(calls) == 1 {
			calls[0].finish(reply, false, err)
			continue
		}
		each, ok := reply.([]any)
		if err == nil && (!ok || len(each) != len(calls)) {
			err = errMalformedReply
		}
		for j, c := range calls {
			switch {
			case err != nil:
				c.finish(nil, j > 0, err)
			default:
				// A decision's own error is an error reply in the list.
				if e, ok := each[j].(error); ok {
					c.finish(nil, j > 0, e)
				} else {
					c.finish(each[j], j > 0, nil)
				}
			}
		}
	}
	for _, calls := range w.groups {
		clear(calls)
	}
	for i := range w.merged {
		clear(w.merged[i])
		w.merged[i] = w.merged[i][:0]
	}
}

// group puts live's calls into w's groups, one command each, but the
// merged script's calls together (in a Cluster, those over the same keys):
// the calls of a batch are few, so each finds its group by a look at the
// ones before. The groups' slices are reused from batch to batch.
func (b *batcher) group(live []*call, w *sending) {
	w.groups = w.groups[:0]
next:
	for _, c := range live {
		if b.mergeable(c) {
			for i, g := range w.groups {
				if b.mergeable(g[0]) && b.together(g[0], c) {
					w.groups[i] = append(g, c)
					continue next
				}
			}
		}
		if n := len(w.groups); n < cap(w.groups) {
			w.groups = w.groups[:n+1]
			w.groups[n] = append(w.groups[n][:0], c)
		} else {
			w.groups = append(w.groups, []*call{c})
		}
	}
}

// mergeable reports whether c is a call of the merged script.
func (b *batcher) mergeable(c *call) bool {
	sha, _ := c.cmd[1].(*string)
	return sha != nil && sha == b.merge
}

// together reports whether two calls of the merged script may go as one.
// In a Cluster only calls over the same keys do: those are in one slot,
// and while the slot migrates either all of them are on a node or the
// same ones are missing, so a merged call is refused (TRYAGAIN) only
// where each alone would be.
func (b *batcher) together(x, y *call) bool {
	return !b.bySlot || sameKeys(x, y)
}

// merge is the command of group i of merged calls, made in the arguments
// kept for it.
func (w *sending) merge(i int) []any {
	for len(w.merged) <= i {
		w.merged = append(w.merged, nil)
	}
	w.merged[i] = merged(w.merged[i], w.groups[i])
	return w.merged[i]
}

// merged appends to cmd one EVALSHA of the rate-limit script for calls,
// each made by script.command (in a Cluster over the same keys), in the
// form lua/driver.lua reads: the keys of every call whose keys are not
// the call's before, then "b", the number of calls, and for each call its
// number of keys (0 when they are the call's before), its number of
// arguments, how many of them lead as the call's before do, and the rest.
// The calls of one route and subject differ in their last arguments
// alone (the evaluation ID), so each costs the write and Redis's parser
// a few arguments, not all of them.
func merged(cmd []any, calls []*call) []any {
	// Whether each call's keys are the call's before, found once for
	// KEYS and for ARGV (a batch holds at most maxBatch calls).
	var keysBefore [maxBatch]bool
	cmd = append(cmd, "evalsha", calls[0].cmd[1], 0)
	for i, c := range calls {
		keysBefore[i] = i > 0 && sameKeys(calls[i-1], c)
		if !keysBefore[i] {
			cmd = append(cmd, c.cmd[cmdHead:cmdHead+c.cmd[2].(int)]...)
		}
	}
	cmd[2] = len(cmd) - cmdHead
	cmd = append(cmd, "b", len(calls))
	var before []any // the arguments of the call before
	for i, c := range calls {
		k := c.cmd[2].(int)
		args := c.cmd[cmdHead+k:]
		if keysBefore[i] {
			k = 0
		}
		lead := leading(before, args)
		cmd = append(cmd, k, len(args), lead)
		cmd = append(cmd, args[lead:]...)
		before = args
	}
	return cmd
}

// sameKeys reports whether two calls made by script.command name the
// same keys.
func sameKeys(x, y *call) bool {
	n := x.cmd[2].(int)
	if y.cmd[2].(int) != n {
		return false
	}
	for i := cmdHead; i < cmdHead+n; i++ {
		if *x.cmd[i].(*string) != *y.cmd[i].(*string) {
			return false
		}
	}
	return true
}

// leading is how many of y's first arguments are x's, as Redis reads
// them: the kinds script arguments are made of (appendArgs), compared by
// value; any other kind is taken as different.
func leading(x, y []any) int {
	n := 0
	for n < len(x) && n < len(y) && sameArg(x[n], y[n]) {
		n++
	}
	return n
}

func sameArg(x, y any) bool {
	switch x := x.(type) {
	case int:
		y, ok := y.(int)
		return ok && x == y
	case int64:
		y, ok := y.(int64)
		return ok && x == y
	case string:
		y, ok := y.(string)
		return ok && x == y
	case *string:
		y, ok := y.(*string)
		return ok && (x == y || *x == *y)
	}
	return false
}

// close stops the workers once their pipelines are answered; calls still
// queued were never sent and fail as such.
func (b *batcher) close() {
	close(b.stop)
	b.wg.Wait()
	b.drain()
}

// drain fails the calls queued once the batcher is closed: never sent.
// A caller that queues its call after close drains too.
func (b *batcher) drain() {
	for {
		select {
		case c := <-b.queue:
			c.finish(nil, false, errNotSentClosed)
		default:
			return
		}
	}
}
