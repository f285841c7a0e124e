package overload

// The queue is a pool's waiting requests: one level per priority; in a
// level, one FIFO per tenant, and the tenants with waiters in a ring
// served in turn. Every waiter is also in its level's list in order of
// arrival, so that the newest is found at once when the queue sheds. The
// Controller's mutex guards it all.

// waitState is where a waiter stands; only the Controller's mutex changes
// it, once, from waiting.
type waitState uint8

const (
	waiting waitState = iota
	admitted
	shed
)

type waiter struct {
	tenant   *tenant
	priority Priority
	state    waitState
	// ready receives once, when the state leaves waiting by another's
	// hand (admitted or shed).
	ready chan struct{}
	// admission is the slot given, when admitted.
	admission Admission
	// Links in the tenant's FIFO and in the level's arrival order.
	prevInTenant, nextInTenant *waiter
	prevArrival, nextArrival   *waiter
}

// tenant is one subject's waiters at one priority.
type tenant struct {
	key        string
	head, tail *waiter
	n          int
	prev, next *tenant // in the level's ring
}

type level struct {
	tenants map[string]*tenant
	// ring: the tenant served next is ringHead; a tenant served goes to
	// the back if it still has waiters.
	ringHead, ringTail *tenant
	// oldest and newest waiters of the level, by arrival.
	oldest, newest *waiter
	n              int
}

type queue struct {
	levels [numPriorities]level
	n      int
}

// push adds w at the back of its tenant's FIFO, the tenant joining the
// back of the ring if it had no waiter.
func (q *queue) push(w *waiter, key string) {
	l := &q.levels[w.priority.index()]
	t := l.tenants[key]
	if t == nil {
		if l.tenants == nil {
			l.tenants = map[string]*tenant{}
		}
		t = &tenant{key: key}
		l.tenants[key] = t
		t.prev = l.ringTail
		if l.ringTail != nil {
			l.ringTail.next = t
		} else {
			l.ringHead = t
		}
		l.ringTail = t
	}
	w.tenant = t
	w.prevInTenant = t.tail
	if t.tail != nil {
		t.tail.nextInTenant = w
	} else {
		t.head = w
	}
	t.tail = w
	t.n++
	w.prevArrival = l.newest
	if l.newest != nil {
		l.newest.nextArrival = w
	} else {
		l.oldest = w
	}
	l.newest = w
	l.n++
	q.n++
}

// remove takes w out of the queue wherever it is; a tenant left without
// waiters leaves the ring and is forgotten.
func (q *queue) remove(w *waiter) {
	l := &q.levels[w.priority.index()]
	t := w.tenant
	if w.prevInTenant != nil {
		w.prevInTenant.nextInTenant = w.nextInTenant
	} else {
		t.head = w.nextInTenant
	}
	if w.nextInTenant != nil {
		w.nextInTenant.prevInTenant = w.prevInTenant
	} else {
		t.tail = w.prevInTenant
	}
	if w.prevArrival != nil {
		w.prevArrival.nextArrival = w.nextArrival
	} else {
		l.oldest = w.nextArrival
	}
	if w.nextArrival != nil {
		w.nextArrival.prevArrival = w.prevArrival
	} else {
		l.newest = w.prevArrival
	}
	w.prevInTenant, w.nextInTenant, w.prevArrival, w.nextArrival = nil, nil, nil, nil
	t.n--
	l.n--
	q.n--
	if t.n == 0 {
		l.unring(t)
		delete(l.tenants, t.key)
	}
}

func (l *level) unring(t *tenant) {
	if t.prev != nil {
		t.prev.next = t.next
	} else {
		l.ringHead = t.next
	}
	if t.next != nil {
		t.next.prev = t.prev
	} else {
		l.ringTail = t.prev
	}
	t.prev, t.next = nil, nil
}

// next takes the waiter served next: of the highest priority waiting, the
// oldest of the tenant whose turn it is. That tenant's turn passes to the
// next one. nil when the queue is empty.
func (q *queue) next() *waiter {
	for p := numPriorities - 1; p >= 0; p-- {
		l := &q.levels[p]
		t := l.ringHead
		if t == nil {
			continue
		}
		w := t.head
		q.remove(w)
		if t.n > 0 && l.ringTail != t {
			l.unring(t)
			t.prev = l.ringTail
			l.ringTail.next = t
			l.ringTail = t
		}
		return w
	}
	return nil
}

// victim is the waiter to shed so that an arrival of priority p from
// tenant key may wait in a full queue, or nil when the arrival is the one
// to shed: at the lowest priority below p with waiters, the newest waiter
// of the tenant with the most waiting; else, at p, the newest waiter of
// the tenant with the most waiting, when that is more than the arrival's
// tenant would have. So one tenant can hold neither the whole queue nor,
// by arriving more often, keep another's waiter the newest and so the
// one to go. Finding that tenant takes a look at each tenant waiting at
// that priority: a cost paid only when the queue is full.
func (q *queue) victim(p Priority, key string) *waiter {
	for lower := Sheddable; lower < p; lower++ {
		if t := q.levels[lower.index()].heaviest(); t != nil {
			return t.tail
		}
	}
	l := &q.levels[p.index()]
	t := l.heaviest()
	if t == nil || t.key == key {
		return nil
	}
	mine := 0
	if own := l.tenants[key]; own != nil {
		mine = own.n
	}
	if t.n > mine+1 {
		return t.tail
	}
	return nil
}

// heaviest is the tenant with the most waiters at l (of equals, the
// latest in the ring: the one served last), or nil when none waits.
func (l *level) heaviest() *tenant {
	var best *tenant
	for t := l.ringHead; t != nil; t = t.next {
		if best == nil || t.n >= best.n {
			best = t
		}
	}
	return best
}
