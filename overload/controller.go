package overload

import (
	"context"
	"sync"
	"time"
)

// Result is what became of a request that asked for a slot.
type Result uint8

const (
	// Admitted: the request holds a slot until its Admission is released.
	Admitted Result = iota
	// Shed: the queue was full, and the request was the one to go (on
	// arrival, or later to make room for a higher priority).
	Shed
	// TimedOut: the request waited QueueTimeout without a slot.
	TimedOut
	// Left: the request's context ended while it waited.
	Left
)

var resultNames = [...]string{"admitted", "shed", "timed_out", "left"}

func (r Result) String() string { return resultNames[r] }

// Controller limits the requests in flight to one pool and queues those
// over the limit. It starts no goroutine: it moves when a request asks,
// leaves the queue or is released. Its methods are safe for concurrent
// use.
type Controller struct {
	mu       sync.Mutex
	opts     Options
	inFlight int
	queue    queue
	gradient *gradient // nil without Adaptive
}

// New returns a Controller for o, or o's problems (Validate).
func New(o Options) (*Controller, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	c := &Controller{}
	c.apply(o.withDefaults())
	return c, nil
}

// Reconfigure applies o (as New checks it) to c, keeping its requests in
// flight, its queue and what the adaptive limit has learnt: a reload that
// changes the numbers neither loses a waiter nor admits one twice. A
// smaller queue sheds nobody; it takes no arrival until it is below its
// new size.
func (c *Controller) Reconfigure(o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.apply(o.withDefaults())
	c.dispatch()
	return nil
}

func (c *Controller) apply(o Options) {
	c.opts = o
	switch {
	case !o.Adaptive:
		c.gradient = nil
	case c.gradient == nil:
		c.gradient = newGradient(o.MinLimit, o.MaxInFlight)
	default:
		c.gradient.retune(o.MinLimit, o.MaxInFlight)
	}
}

// capacity is how many requests may be in flight now.
func (c *Controller) capacity() int {
	if c.gradient != nil {
		return c.gradient.capacity()
	}
	return c.opts.MaxInFlight
}

// Limit is the number of requests that may be in flight now.
func (c *Controller) Limit() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.capacity()
}

// Queued is the number of requests waiting now.
func (c *Controller) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queue.n
}

// InFlight is the number of admissions not yet released.
func (c *Controller) InFlight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inFlight
}

// Admit asks for a slot for a request of priority p from tenant (a
// pseudonym: tenants of a priority are served in turn). Under the limit,
// with nobody waiting, it returns at once; else it waits in the queue
// until a slot is its, it is shed, QueueTimeout passes or ctx ends. The
// Admission is valid only with Admitted, and must then be released.
func (c *Controller) Admit(ctx context.Context, p Priority, tenant string) (Admission, Result) {
	c.mu.Lock()
	if c.queue.n == 0 && c.inFlight < c.capacity() {
		a := c.admit()
		c.mu.Unlock()
		return a, Admitted
	}
	if c.queue.n >= c.opts.Queue {
		v := c.queue.victim(p, tenant)
		if v == nil {
			c.mu.Unlock()
			return Admission{}, Shed
		}
		c.queue.remove(v)
		v.state = shed
		v.ready <- struct{}{}
	}
	w := &waiter{priority: p, ready: make(chan struct{}, 1)}
	c.queue.push(w, tenant)
	timeout := c.opts.QueueTimeout
	c.mu.Unlock()

	timer := time.NewTimer(timeout)
	var result Result
	select {
	case <-w.ready:
	case <-timer.C:
		result = TimedOut
	case <-ctx.Done():
		result = Left
	}
	timer.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	switch w.state {
	case admitted:
		if ctx.Err() != nil {
			// Given a slot as it left: the slot goes to the next.
			c.release(w.admission, abandoned)
			return Admission{}, Left
		}
		return w.admission, Admitted
	case shed:
		return Admission{}, Shed
	}
	c.queue.remove(w)
	return Admission{}, result
}

// admit takes a slot; c.mu is held.
func (c *Controller) admit() Admission {
	c.inFlight++
	a := Admission{c: c}
	if g := c.gradient; g != nil {
		g.admitted(c.inFlight)
		a.epoch = g.epoch
		a.start = c.opts.Now()
	}
	return a
}

// dispatch gives free slots to waiters, highest priority first; c.mu is
// held.
func (c *Controller) dispatch() {
	for c.queue.n > 0 && c.inFlight < c.capacity() {
		w := c.queue.next()
		w.admission = c.admit()
		w.state = admitted
		w.ready <- struct{}{}
	}
}

// ending is how an Admission's exchange with the pool ended, which
// decides whether its latency is a sample of the pool's.
type ending uint8

const (
	answered ending = iota
	failed
	abandoned
)

// release ends a's slot, its latency a sample of the pool's as how says;
// c.mu is held.
func (c *Controller) release(a Admission, how ending) {
	c.inFlight--
	if g := c.gradient; g != nil && how != abandoned {
		now := c.opts.Now()
		if d := now.Sub(a.start); how == answered || g.slow(d) {
			g.sample(a.epoch, d, now, c.inFlight)
		}
	}
	c.dispatch()
}

// Admission is a slot of a Controller, held from Admit until Release or
// Abandon. The zero Admission holds none; releasing it does nothing.
type Admission struct {
	c     *Controller
	start time.Time // with an adaptive limit
	epoch uint64
}

// Release ends the slot: the exchange with the pool is over, and its
// latency counts toward the adaptive limit.
func (a *Admission) Release() { a.end(answered) }

// Fail ends the slot of an exchange the pool failed (a reset, a broken
// response): its latency counts toward the adaptive limit only when it is
// no less than the pool's unloaded latency. A failure at once says
// nothing of the pool's load, and would raise the limit.
func (a *Admission) Fail() { a.end(failed) }

// Abandon ends the slot without taking its latency as the pool's: the
// client left, or the gateway answered instead of the pool.
func (a *Admission) Abandon() { a.end(abandoned) }

func (a *Admission) end(how ending) {
	c := a.c
	if c == nil {
		return
	}
	a.c = nil
	c.mu.Lock()
	c.release(*a, how)
	c.mu.Unlock()
}
