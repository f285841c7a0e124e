package limiter

import (
	"math"
	"time"
)

type recordKey struct {
	id   evaluationKey
	slot uint32
}

// rememberedDecision is what a retry gets back. Like the Redis scripts, it
// leaves out the limit and the certainty, which follow from the policy.
type rememberedDecision struct {
	expiresAt  int64 // milliseconds
	remaining  int64
	resetAfter time.Duration
	retryAfter time.Duration
}

// recordQueue holds the remembered evaluations of one key older than its
// newest, oldest first, in two rings of a power-of-two length: the IDs apart,
// so that looking for one reads few cache lines. Record number seq, counted
// from the queue's start, sits at position seq & (len-1) while it is held,
// first <= seq < first+n in uint32 arithmetic.
type recordQueue struct {
	ids       []evaluationKey
	decisions []queuedDecision
	first, n  uint32
	bytes     uint32 // the sizes of the records, as the Dedup bounds count them
	indexed   bool   // its records are in recordIndex
}

type queuedDecision struct {
	rememberedDecision
	size    uint32
	allowed bool
}

// recordsScanned is the longest queue searched in order: 16 IDs are four
// cache lines, cheaper to read than a map the size of the shard is to
// update. A longer queue is indexed until it is empty.
const recordsScanned = 16

// dedupRecordOverhead approximates what one remembered decision costs beside
// its evaluation ID, for the MaxBytes bound.
const dedupRecordOverhead = 64

// recall returns the decision remembered under id, if it has not expired.
func (s *memoryShard) recall(i uint32, e *memorySlot, id evaluationKey, now int64, p *Policy) (Decision, bool) {
	if e.flags&lastHeld != 0 && e.lastID == id && e.last.expiresAt > now {
		return e.last.decision(p, e.flags&lastAllowed != 0, now), true
	}
	if e.queue == 0 {
		return Decision{}, false
	}
	q := &s.queues[e.queue]
	mask := uint32(len(q.ids) - 1)
	pos := -1
	if q.indexed {
		if seq, ok := s.recordIndex[recordKey{id, i}]; ok {
			pos = int(seq & mask)
		}
	} else {
		// The newest record of an ID counts, as in the index.
		for j := q.n; j > 0; j-- {
			if at := (q.first + j - 1) & mask; q.ids[at] == id {
				pos = int(at)
				break
			}
		}
	}
	if pos < 0 || q.decisions[pos].expiresAt <= now {
		return Decision{}, false
	}
	return q.decisions[pos].decision(p, q.decisions[pos].allowed, now), true
}

func (r rememberedDecision) decision(p *Policy, allowed bool, nowMillis int64) Decision {
	return p.decision(allowed, r.remaining, r.resetAfter, r.retryAfter, nowMillis)
}

// remember keeps d under id for the policy's dedup TTL, within its bounds on
// the number and size of the evaluations one key remembers.
func (s *memoryShard) remember(i uint32, e *memorySlot, id evaluationKey, idLen int, d Decision, now int64, opts Dedup) {
	size := idLen + dedupRecordOverhead
	maxBytes := min(opts.MaxBytes, math.MaxInt32) // so that the sizes fit uint32
	if size > maxBytes {
		return
	}
	// Every evaluation of a key lives for the same TTL, so the oldest is the
	// first to expire: drop from the front while expired or over a bound.
	for e.flags&lastHeld != 0 {
		n, bytes := 1, int(e.lastSize)
		if e.queue != 0 {
			q := &s.queues[e.queue]
			n, bytes = n+int(q.n), bytes+int(q.bytes)
		}
		if s.oldestExpiry(e) > now && n < opts.MaxEntries && bytes+size <= maxBytes {
			break
		}
		s.forgetOldest(i, e)
	}
	if e.flags&lastHeld != 0 {
		s.enqueueLast(i, e)
	}
	e.lastID = id
	e.last = rememberedDecision{
		expiresAt: now + opts.TTL.Milliseconds(),
		remaining: d.Remaining, resetAfter: d.ResetAfter, retryAfter: d.RetryAfter,
	}
	e.lastSize = uint32(size)
	e.flags |= lastHeld
	if d.Allowed {
		e.flags |= lastAllowed
	} else {
		e.flags &^= lastAllowed
	}
}

// enqueueLast moves the newest remembered evaluation of slot i out of the
// slot, to the back of the key's queue.
func (s *memoryShard) enqueueLast(i uint32, e *memorySlot) {
	if e.queue == 0 {
		e.queue = s.newQueue()
	}
	q := &s.queues[e.queue]
	if int(q.n) == len(q.ids) {
		q.grow()
	}
	seq := q.first + q.n
	pos := seq & uint32(len(q.ids)-1)
	q.ids[pos] = e.lastID
	q.decisions[pos] = queuedDecision{rememberedDecision: e.last, size: e.lastSize, allowed: e.flags&lastAllowed != 0}
	q.n++
	q.bytes += e.lastSize
	// An older record with the same ID, which can only have expired, stays
	// in the queue until its turn to go, but is no longer found.
	switch {
	case q.indexed:
		s.recordIndex[recordKey{e.lastID, i}] = seq
	case q.n > recordsScanned:
		for j := range q.n {
			seq := q.first + j
			s.recordIndex[recordKey{q.ids[seq&uint32(len(q.ids)-1)], i}] = seq
		}
		q.indexed = true
	}
}

func (s *memoryShard) newQueue() uint32 {
	if n := len(s.freeQueues); n > 0 {
		r := s.freeQueues[n-1]
		s.freeQueues = s.freeQueues[:n-1]
		return r
	}
	s.queues = append(s.queues, recordQueue{})
	return uint32(len(s.queues) - 1)
}

// grow doubles a full queue's rings; every record keeps its sequence number.
func (q *recordQueue) grow() {
	size := max(2*len(q.ids), 4)
	ids, decisions := make([]evaluationKey, size), make([]queuedDecision, size)
	for j := range q.n {
		seq := q.first + j
		from, to := seq&uint32(len(q.ids)-1), seq&uint32(size-1)
		ids[to], decisions[to] = q.ids[from], q.decisions[from]
	}
	q.ids, q.decisions = ids, decisions
}

func (s *memoryShard) oldestExpiry(e *memorySlot) int64 {
	if e.queue != 0 {
		q := &s.queues[e.queue]
		return q.decisions[q.first&uint32(len(q.ids)-1)].expiresAt
	}
	return e.last.expiresAt
}

// forgetOldest drops the oldest remembered evaluation of slot i; there must
// be one.
func (s *memoryShard) forgetOldest(i uint32, e *memorySlot) {
	if e.queue == 0 {
		e.flags &^= lastHeld | lastAllowed
		return
	}
	q := &s.queues[e.queue]
	pos := q.first & uint32(len(q.ids)-1)
	if q.indexed {
		k := recordKey{q.ids[pos], i}
		if s.recordIndex[k] == q.first {
			delete(s.recordIndex, k)
		}
	}
	q.bytes -= q.decisions[pos].size
	q.first++
	if q.n--; q.n == 0 {
		s.freeQueue(e)
	}
}

// freeQueue hands back slot e's queue, whose records must be unindexed.
func (s *memoryShard) freeQueue(e *memorySlot) {
	s.queues[e.queue] = recordQueue{}
	s.freeQueues = append(s.freeQueues, e.queue)
	e.queue = 0
}
