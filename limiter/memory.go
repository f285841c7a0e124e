package limiter

import (
	"context"
	"encoding/binary"
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Clock tells the time. Backends take one so tests can move time by hand.
type Clock interface {
	Now() time.Time
}

// systemClock is the process's wall clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// DefaultMemoryMaxEntries is MemoryOptions.MaxEntries's default.
const DefaultMemoryMaxEntries = 1_000_000

// MemoryOptions configures a Memory backend.
type MemoryOptions struct {
	// MaxEntries caps the number of keys held. When full, the least recently
	// used key is dropped and counted in Evictions. Default 1,000,000.
	// The cap is split evenly over the shards, so a shard that draws more
	// than its share of keys evicts before the total is reached.
	MaxEntries int
	// SweepInterval is how often expired keys, and expired remembered
	// evaluations of live keys, are removed. Default 10s. It is measured
	// on Clock: a sweep is due SweepInterval of Clock's time after the
	// last one was due, so a test that moves an injected clock gets its
	// sweeps without waiting real time.
	SweepInterval time.Duration
	Clock         Clock
}

const memoryShards = 64

// Memory is the in-process backend: one gateway instance, the three
// algorithms of the Redis scripts, bounded memory with expiry. It is safe for
// concurrent use. Close stops its sweeper.
//
// A key costs about 170 bytes: a 128-byte slot, which also holds its newest
// remembered evaluation, and its share of the shard's index. A key that is
// asked again within the dedup TTL keeps its older evaluations in a queue of
// its own, 56 bytes each. Slots are not pointers, nor do they hold any, so
// the garbage collector never scans them. Freed slots are reused, not handed
// back: the heap stays at the peak number of keys.
type Memory struct {
	clock     Clock
	seeds     [2]maphash.Seed
	shards    [memoryShards]paddedShard
	evictions atomic.Uint64
	// sweepAt is when, in Unix milliseconds of clock, the next sweep is
	// due; an evaluation that sees it passed wakes the sweeper.
	sweepAt    atomic.Int64
	sweepEvery time.Duration
	wake       chan struct{}
	stop       chan struct{}
	done       chan struct{}
	closeOnce  sync.Once
}

// memoryKey names one policy revision and subject by 128 bits: two maphash
// sums of the encoded key under the backend's two random seeds. The full key
// is not kept, so two keys that share all 128 bits would share a budget. For
// keys that do not depend on the seeds, which never leave the process, the
// chance that any two of n keys collide is about n²/2¹²⁹: 1.5e-27 for a
// million keys, 1.5e-15 for a trillion distinct keys over a process's life.
// (maphash is not a cryptographic hash; subjects are keyed pseudonyms that a
// client cannot choose either.)
type memoryKey [16]byte

// half is the first 64 bits of k, which the index is keyed by.
func (k memoryKey) half() uint64 { return binary.LittleEndian.Uint64(k[:8]) }

// evaluationKey is an evaluation ID hashed the same way. Two IDs of one key
// that collide would make the later evaluation a replay of the earlier.
type evaluationKey [16]byte

// memoryShard holds the keys whose hash selects it. Slots are addressed by
// index, 0 meaning none, and live in pages that never move, so a pointer to
// one stays valid while the lock is held. Queues are addressed the same way,
// but their slice moves when it grows: no pointer to one outlives newQueue.
type memoryShard struct {
	mu         sync.Mutex
	maxEntries int

	// index finds the slot of each key held by the key's first half, the
	// slot holding it in full; a key whose first half another key has taken
	// is found in collided instead, which with n keys in the shard happens
	// to a new key with a chance of n/2⁶⁴, 1e-15 at the default size. A map
	// keyed by uint64 costs less time and memory than one keyed by 16 bytes.
	index     map[uint64]uint32
	collided  map[memoryKey]uint32
	slots     []*slotPage
	slotsUsed uint32 // slots ever handed out, counting the unused slot 0
	freeSlot  uint32 // freed slots, linked through lessRecent
	// head is the most recently used slot, tail the least.
	head, tail uint32

	queues     []recordQueue // queue 0 is unused
	freeQueues []uint32
	// recordIndex finds the records of a queue longer than recordsScanned,
	// by sequence number; a shorter queue is searched in order.
	recordIndex map[recordKey]uint32
}

// paddedShard keeps each shard's lock and list heads off its neighbours'
// cache lines (two, for the adjacent-line prefetcher).
type paddedShard struct {
	memoryShard
	_ [128 - unsafe.Sizeof(memoryShard{})%128]byte
}

type recordKey struct {
	id   evaluationKey
	slot uint32
}

// memorySlot is one key: the algorithm's state, its expiry, its place in the
// shard's LRU list, and the evaluations it remembers for retries. Those are
// the newest, held in the slot itself (lastID, last), and the older ones, in
// the key's queue if it has one.
//
// The first 64 bytes are all that a decision without de-duplication reads,
// one cache line, unless it is the sliding counter's, which also keeps prev.
type memorySlot struct {
	key memoryKey

	// The fields of state, which see; stateValid in flags is its Valid.
	start, count, seen int64

	expiresAt              int64 // milliseconds
	moreRecent, lessRecent uint32
	flags                  slotFlags

	prev     int64
	lastID   evaluationKey
	last     rememberedDecision
	lastSize uint32
	queue    uint32
}

type slotFlags uint8

const (
	slotInUse slotFlags = 1 << iota
	stateValid
	lastHeld
	lastAllowed
)

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

// Slots come in pages of one 8 KiB size class.
const (
	slotsPerPage = 64
	slotPageMask = slotsPerPage - 1
	slotPageBits = 6
)

type slotPage [slotsPerPage]memorySlot

// A page must not outgrow its size class.
var _ = [128 - unsafe.Sizeof(memorySlot{})]struct{}{}

// NewMemory returns a ready Memory backend.
func NewMemory(opts MemoryOptions) *Memory {
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultMemoryMaxEntries
	}
	if opts.SweepInterval <= 0 {
		opts.SweepInterval = 10 * time.Second
	}
	if opts.Clock == nil {
		opts.Clock = systemClock{}
	}
	m := &Memory{
		clock:      opts.Clock,
		seeds:      [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		sweepEvery: opts.SweepInterval,
		wake:       make(chan struct{}, 1),
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
	}
	m.sweepAt.Store(opts.Clock.Now().Add(opts.SweepInterval).UnixMilli())
	// A shard never holds more slots than its cap, plus the unused slot 0,
	// so the cap keeps slot numbers within uint32.
	perShard := min(max(opts.MaxEntries/memoryShards, 1), math.MaxInt32)
	for i := range m.shards {
		s := &m.shards[i]
		s.maxEntries = perShard
		s.index = make(map[uint64]uint32)
		s.collided = make(map[memoryKey]uint32)
		s.slotsUsed = 1
		s.queues = make([]recordQueue, 1)
		s.recordIndex = make(map[recordKey]uint32)
	}
	go m.sweeper()
	return m
}

// Close stops the background sweeper. Evaluate keeps working after Close.
func (m *Memory) Close() error {
	m.closeOnce.Do(func() { close(m.stop); <-m.done })
	return nil
}

// Evictions counts live keys dropped because the backend was full. Each one
// handed a subject a fresh budget early; a rising count means MaxEntries is
// too small for the traffic.
func (m *Memory) Evictions() uint64 { return m.evictions.Load() }

// entries is the number of keys held, expired or not.
func (m *Memory) entries() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += s.len()
		s.mu.Unlock()
	}
	return n
}

// Ready reports whether the backend can decide; memory always can.
func (m *Memory) Ready(context.Context) error { return nil }

// Evaluate decides one request. It never returns Indeterminate: nothing here
// can fail after the state is touched.
func (m *Memory) Evaluate(ctx context.Context, req Request) Outcome {
	if o := admit(ctx, req); o != nil {
		return o
	}
	var keysOn [scratchPolicies]memoryKey
	keys := keysOn[:0]
	var keyBuf [160]byte
	for _, p := range req.Policies {
		keys = append(keys, m.sum(appendMemoryKey(keyBuf[:0], p, req.Subject)))
	}
	return m.evaluate(req, keys)
}

// scratchPolicies is how many policies a request may have before a
// decision's per-policy scratch leaves the stack.
const scratchPolicies = 4

// evaluate decides an admitted request whose policies' keys are keys,
// under the locks of every shard they live in, taken in shard order, so
// the decision is atomic: no other evaluation sees some of its charges and
// not the others. With de-duplication each key remembers its own policy's
// decision under the evaluation ID; a retry is a replay only when every
// key still does.
func (m *Memory) evaluate(req Request, keys []memoryKey) Outcome {
	ps := req.Policies
	n := len(ps)
	var (
		idxOn   [scratchPolicies]uint32
		slotsOn [scratchPolicies]*memorySlot
		stepsOn [scratchPolicies]step
		eachOn  [scratchPolicies]Decision
	)
	idx, slots, steps, each := idxOn[:0], slotsOn[:0], stepsOn[:0], eachOn[:0]
	if n > scratchPolicies {
		idx, slots, steps, each = make([]uint32, 0, n), make([]*memorySlot, 0, n), make([]step, 0, n), make([]Decision, 0, n)
	}
	idx, slots, steps, each = idx[:n], slots[:n], steps[:n], each[:n]
	dedup := ps[0].Dedup.Enabled && req.EvaluationID != ""
	var id evaluationKey
	if dedup {
		id = m.sumString(req.EvaluationID)
	}
	var locked uint64 // one bit per shard; memoryShards is 64
	for _, k := range keys {
		locked |= 1 << (k[0] % memoryShards)
	}
	for l := locked; l != 0; l &= l - 1 {
		m.shards[bits.TrailingZeros64(l)].mu.Lock()
	}
	defer func() {
		for l := locked; l != 0; l &= l - 1 {
			m.shards[bits.TrailingZeros64(l)].mu.Unlock()
		}
	}()
	nowMillis := m.clock.Now().UnixMilli()
	m.wakeSweeperIfDue(nowMillis)
	for k := range ps {
		s := &m.shards[keys[k][0]%memoryShards]
		i, e := s.find(keys[k])
		if i != 0 {
			if e.expiresAt <= nowMillis {
				s.remove(i)
				i, e = 0, nil
			} else {
				s.touch(i, e)
			}
		}
		idx[k], slots[k] = i, e
	}
	if dedup {
		replay := true
		for k, p := range ps {
			e := slots[k]
			if e == nil {
				replay = false
				break
			}
			d, ok := m.shards[keys[k][0]%memoryShards].recall(idx[k], e, id, nowMillis, p)
			if !ok {
				replay = false
				break
			}
			each[k] = d
		}
		if replay {
			return evaluated(ps, each)
		}
	}
	for k, p := range ps {
		var st state
		if slots[k] != nil {
			st = slots[k].state(p.Algorithm)
		}
		steps[k] = decide(p, st, nowMillis, req.Cost)
		if steps[k].clockUnsafe {
			return Unavailable{Category: ClockUnsafe}
		}
		each[k] = steps[k].decision
	}
	charge := admitted(ps, each)
	if !charge {
		uncharged(each, req.Cost)
	}
	for k := range ps {
		res := steps[k]
		write := charge && res.charged
		if !write && !dedup {
			continue
		}
		s := &m.shards[keys[k][0]%memoryShards]
		i, e := idx[k], slots[k]
		if e == nil {
			i, e = s.insert(keys[k], &m.evictions, nowMillis)
			// A full shard may have evicted the key of a later policy,
			// and handed its slot to this one: that policy's key is
			// inserted again rather than written into another's slot.
			for l := k + 1; l < n; l++ {
				if slots[l] != nil && slots[l].key != keys[l] {
					idx[l], slots[l] = 0, nil
				}
			}
		}
		if write {
			e.setState(res.next)
			e.expiresAt = max(e.expiresAt, nowMillis+res.ttlMillis)
		}
		if dedup {
			s.remember(i, e, id, len(req.EvaluationID), each[k], nowMillis, ps[0].Dedup)
			e.expiresAt = max(e.expiresAt, nowMillis+ps[0].Dedup.TTL.Milliseconds())
		}
	}
	return evaluated(ps, each)
}

// appendMemoryKey carries the policy revision, so a changed policy starts
// afresh. The name's length comes first and the revision has a fixed width,
// so no two policies and subjects encode alike.
func appendMemoryKey(b []byte, p *Policy, subject string) []byte {
	b = binary.AppendUvarint(b, uint64(len(p.Name)))
	b = append(b, p.Name...)
	b = binary.LittleEndian.AppendUint64(b, uint64(p.Revision))
	return append(b, subject...)
}

func (m *Memory) sum(b []byte) (k memoryKey) {
	binary.LittleEndian.PutUint64(k[:8], maphash.Bytes(m.seeds[0], b))
	binary.LittleEndian.PutUint64(k[8:], maphash.Bytes(m.seeds[1], b))
	return k
}

func (m *Memory) sumString(s string) (k evaluationKey) {
	binary.LittleEndian.PutUint64(k[:8], maphash.String(m.seeds[0], s))
	binary.LittleEndian.PutUint64(k[8:], maphash.String(m.seeds[1], s))
	return k
}

// state is the key's state under algorithm a, which leaves Prev zero unless
// the algorithm keeps it.
func (e *memorySlot) state(a Algorithm) state {
	st := state{Valid: e.flags&stateValid != 0, Start: e.start, Count: e.count, Seen: e.seen}
	if a.spec().keepsPrev {
		st.Prev = e.prev
	}
	return st
}

func (e *memorySlot) setState(st state) {
	e.start, e.count, e.seen = st.Start, st.Count, st.Seen
	if st.Prev != 0 || e.prev != 0 { // so that only the sliding counter writes the second line
		e.prev = st.Prev
	}
	if st.Valid {
		e.flags |= stateValid
	} else {
		e.flags &^= stateValid
	}
}

func (s *memoryShard) slot(i uint32) *memorySlot {
	return &s.slots[i>>slotPageBits][i&slotPageMask]
}

// find returns the slot of key, or 0 and nil.
func (s *memoryShard) find(key memoryKey) (uint32, *memorySlot) {
	if i := s.index[key.half()]; i != 0 {
		if e := s.slot(i); e.key == key {
			return i, e
		}
	}
	if len(s.collided) != 0 {
		if i := s.collided[key]; i != 0 {
			return i, s.slot(i)
		}
	}
	return 0, nil
}

func (s *memoryShard) len() int { return len(s.index) + len(s.collided) }

// dedupRecordOverhead approximates what one remembered decision costs beside
// its evaluation ID, for the MaxBytes bound.
const dedupRecordOverhead = 64

// recall returns the decision remembered under id, if it has not expired.
func (s *memoryShard) recall(i uint32, e *memorySlot, id evaluationKey, now int64, p *Policy) (Decision, bool) {
	if e.flags&lastHeld != 0 && e.lastID == id && e.last.expiresAt > now {
		return e.last.decision(p, e.flags&lastAllowed != 0), true
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
	return q.decisions[pos].decision(p, q.decisions[pos].allowed), true
}

func (r rememberedDecision) decision(p *Policy, allowed bool) Decision {
	return p.decision(allowed, r.remaining, r.resetAfter, r.retryAfter)
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

func (s *memoryShard) insert(key memoryKey, evictions *atomic.Uint64, now int64) (uint32, *memorySlot) {
	for s.len() >= s.maxEntries && s.tail != 0 {
		victim := s.tail
		if s.slot(victim).expiresAt > now {
			evictions.Add(1)
		}
		s.remove(victim)
	}
	i := s.freeSlot
	if i != 0 {
		s.freeSlot = s.slot(i).lessRecent
	} else {
		i = s.slotsUsed
		if int(i>>slotPageBits) == len(s.slots) {
			s.slots = append(s.slots, new(slotPage))
		}
		s.slotsUsed++
	}
	e := s.slot(i)
	*e = memorySlot{key: key, flags: slotInUse}
	if _, taken := s.index[key.half()]; taken {
		s.collided[key] = i
	} else {
		s.index[key.half()] = i
	}
	s.pushFront(i, e)
	return i, e
}

// remove frees slot i and every evaluation its key remembers.
func (s *memoryShard) remove(i uint32) {
	e := s.slot(i)
	if s.index[e.key.half()] == i {
		delete(s.index, e.key.half())
	} else {
		delete(s.collided, e.key)
	}
	s.unlink(i, e)
	if e.queue != 0 {
		if q := &s.queues[e.queue]; q.indexed {
			for j := range q.n {
				seq := q.first + j
				k := recordKey{q.ids[seq&uint32(len(q.ids)-1)], i}
				if s.recordIndex[k] == seq {
					delete(s.recordIndex, k)
				}
			}
		}
		s.freeQueue(e)
	}
	*e = memorySlot{lessRecent: s.freeSlot}
	s.freeSlot = i
}

func (s *memoryShard) touch(i uint32, e *memorySlot) {
	if s.head == i {
		return
	}
	s.unlink(i, e)
	s.pushFront(i, e)
}

func (s *memoryShard) pushFront(i uint32, e *memorySlot) {
	e.moreRecent, e.lessRecent = 0, s.head
	if s.head != 0 {
		s.slot(s.head).moreRecent = i
	}
	s.head = i
	if s.tail == 0 {
		s.tail = i
	}
}

func (s *memoryShard) unlink(i uint32, e *memorySlot) {
	if e.moreRecent != 0 {
		s.slot(e.moreRecent).lessRecent = e.lessRecent
	} else {
		s.head = e.lessRecent
	}
	if e.lessRecent != 0 {
		s.slot(e.lessRecent).moreRecent = e.moreRecent
	} else {
		s.tail = e.moreRecent
	}
	e.moreRecent, e.lessRecent = 0, 0
}

// wakeSweeperIfDue is the request path's part in sweeping: an atomic load,
// and a send that never blocks once a sweep is due.
func (m *Memory) wakeSweeperIfDue(nowMillis int64) {
	if nowMillis >= m.sweepAt.Load() {
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
}

// sweeper sweeps whenever a sweep is due on the backend's clock. It looks
// on a wall-clock ticker, which is enough for the system clock and keeps
// an idle backend swept, and whenever an evaluation saw a sweep due, which
// is what an injected clock's time reaches it by.
func (m *Memory) sweeper() {
	defer close(m.done)
	t := time.NewTicker(m.sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		case <-m.wake:
		}
		now := m.clock.Now()
		due := m.sweepAt.Load()
		if now.UnixMilli() < due {
			continue
		}
		m.sweep()
		// The next is due an interval after this one was, as a ticker
		// keeps its beat; a clock that jumped further is followed.
		next := time.UnixMilli(due).Add(m.sweepEvery)
		if !next.After(now) {
			next = now.Add(m.sweepEvery)
		}
		m.sweepAt.Store(next.UnixMilli())
	}
}

// sweep removes every expired key now, and the expired evaluations that the
// live keys remember.
func (m *Memory) sweep() {
	now := m.clock.Now().UnixMilli()
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		for j := uint32(1); j < s.slotsUsed; j++ {
			e := s.slot(j)
			switch {
			case e.flags&slotInUse == 0:
			case e.expiresAt <= now:
				s.remove(j)
			default:
				for e.flags&lastHeld != 0 && s.oldestExpiry(e) <= now {
					s.forgetOldest(j, e)
				}
			}
		}
		s.mu.Unlock()
	}
}
