package limiter

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgegate/gateway/internal/option"
)

// DefaultMemoryMaxEntries is MemoryOptions.MaxEntries's default.
const DefaultMemoryMaxEntries = 1_000_000

// MemoryOptions configures a Memory backend.
type MemoryOptions struct {
	// MaxEntries caps the number of keys held. When full, the least recently
	// used key is dropped and counted in Evictions. Default 1,000,000;
	// else at least MinMemoryMaxEntries.
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
	// Registerer receives the backend's metrics; nil registers none.
	Registerer prometheus.Registerer
}

const memoryShards = 64

// MinMemoryMaxEntries is the least MemoryOptions.MaxEntries may be when
// set: one key a shard.
const MinMemoryMaxEntries = memoryShards

// Validate reports a MaxEntries below its minimum as a *option.Error naming
// the field as a memory block does ("max_entries"). A zero takes the
// default. Open refuses what it reports.
func (o MemoryOptions) Validate() error {
	if o.MaxEntries != 0 && o.MaxEntries < MinMemoryMaxEntries {
		return &option.Error{Field: "max_entries", Summary: "Value too small", Detail: fmt.Sprintf("max_entries must be at least %d.", MinMemoryMaxEntries)}
	}
	return nil
}

// Memory is the in-process backend: one gateway instance, every
// algorithm the Redis scripts have, bounded memory with expiry. It is safe for
// concurrent use. Close stops its sweeper.
//
// A key costs about 150 bytes: a 128-byte slot, which also holds its newest
// remembered evaluation, and its share of the shard's index. A key that is
// asked again within the dedup TTL keeps its older evaluations in a queue of
// its own, 56 bytes each. Slots are not pointers, nor do they hold any, so
// the garbage collector never scans them. Freed slots are reused, not handed
// back: the heap stays at the peak number of keys.
type Memory struct {
	clock     Clock
	seeds     [2]maphash.Seed
	shards    [memoryShards]paddedShard
	evictions evictionCounts
	// sweepAt is when, in Unix milliseconds of clock, the next sweep is
	// due; an evaluation that sees it passed wakes the sweeper.
	sweepAt    atomic.Int64
	sweepEvery time.Duration
	wake       chan struct{}
	stop       chan struct{}
	done       chan struct{}
	closeOnce  sync.Once
	overrides  memoryOverrides
	penalties  memoryPenalties
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

// half is the first 64 bits of k; the index keys by its upper 32 (slotIndex).
func (k memoryKey) half() uint64 { return binary.LittleEndian.Uint64(k[:8]) }

// evaluationKey is an evaluation ID hashed the same way. Two IDs of one key
// that collide would make the later evaluation a replay of the earlier.
type evaluationKey [16]byte

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
	m.overrides.m = m
	m.sweepAt.Store(opts.Clock.Now().Add(opts.SweepInterval).UnixMilli())
	// A shard never holds more slots than its cap, plus the unused slot 0,
	// so the cap keeps slot numbers within uint32.
	perShard := min(max(opts.MaxEntries/memoryShards, 1), math.MaxInt32)
	for i := range m.shards {
		s := &m.shards[i]
		s.maxEntries = perShard
		s.index.grow()
		s.slotsUsed = 1
		s.queues = make([]recordQueue, 1)
		s.recordIndex = make(map[recordKey]uint32)
		s.leases = make(map[memoryKey]map[evaluationKey]heldLease)
	}
	if opts.Registerer != nil {
		m.evictions.register(opts.Registerer, prometheus.CounterOpts{Name: "gateway_limiter_evictions_total", Help: "Keys the memory backend, full, dropped early (result=evicted: each gave a subject a fresh budget) or refused to hold (result=refused: every key held was live; the request got 503)."})
		m.penalties.book.register(opts.Registerer)
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
func (m *Memory) Evictions() uint64 { return m.evictions.evicted.Load() }

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
	if req.settles != nil {
		return req.settles.settle(ctx, req)
	}
	if o := admit(ctx, req); o != nil {
		return o
	}
	var keysOn [scratchPolicies]memoryKey
	var starts []int64
	if req.Phase == Admission && req.Policies.chargedByResponse {
		starts = make([]int64, req.Policies.Len())
	}
	o := m.evaluate(req, m.keys(req, keysOn[:0]), nil, starts)
	return admission(m, req, o, starts)
}

// keys appends to keys those of req's policies and subject.
func (m *Memory) keys(req Request, keys []memoryKey) []memoryKey {
	var keyBuf [160]byte
	for _, p := range req.Policies.list {
		keys = append(keys, m.sum(appendMemoryKey(keyBuf[:0], p, req.Subject)))
	}
	return keys
}

// returnReserve gives req.Cost back to req's one policy in the state
// that starts at start, while it still holds it.
func (m *Memory) returnReserve(ctx context.Context, req Request, start int64) Outcome {
	if o := admit(ctx, req); o != nil {
		return o
	}
	var keysOn [scratchPolicies]memoryKey
	return m.evaluate(req, m.keys(req, keysOn[:0]), []int64{start}, nil)
}

// evaluate decides an admitted request whose policies' keys are keys,
// under the locks of every shard they live in, taken in shard order, so
// the decision is atomic: no other evaluation sees some of its charges and
// not the others. With de-duplication each key remembers its own policy's
// decision under the evaluation ID; a retry is a replay only when every
// key still does. returned, in the returningLease phase, are the state
// starts each policy gets req.Cost back to; starts, when not nil,
// receives each charged policy's state start.
func (m *Memory) evaluate(req Request, keys []memoryKey, returned, starts []int64) Outcome {
	set := req.Policies
	ps := set.list
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
	dedup := set.Dedup().Enabled && req.EvaluationID != "" && req.Phase != givingBack
	leased := set.holdsLeases
	reserves := req.Phase == givingBack || req.MayDelay && set.delays
	var id evaluationKey
	if dedup || leased || reserves {
		id = m.sumString(req.EvaluationID)
	}
	locked := m.lock(keys)
	defer m.unlock(locked)
	nowMillis := m.clock.Now().UnixMilli()
	m.wakeSweeperIfDue(nowMillis)
	first := &m.shards[keys[0][0]%memoryShards]
	reserved := returned
	if req.Phase == givingBack {
		var ok bool
		if reserved, ok = first.takeReservation(id, nowMillis); !ok {
			return Evaluated{}
		}
	}
	m.find(keys, idx, slots, nowMillis)
	if dedup && m.recall(ps, keys, idx, slots, id, nowMillis, each) {
		return evaluated(ps, each)
	}
	for k, p := range ps {
		s := &m.shards[keys[k][0]%memoryShards]
		p = s.policyFor(keys[k], p, nowMillis)
		st := s.current(keys[k], slots[k], p, nowMillis)
		if reserved != nil {
			steps[k] = giveBack(p, st, req.Cost, reserved[k])
		} else {
			steps[k] = decide(p, st, nowMillis, req.Cost, req.Phase, req.MayDelay)
		}
		if steps[k].clockUnsafe {
			return Unavailable{Category: ClockUnsafe}
		}
		// An override changes what is left, not the quota reported (as
		// on Redis).
		steps[k].decision.Limit = ps[k].Quota()
		each[k] = steps[k].decision
		if starts != nil && steps[k].charged {
			starts[k] = steps[k].next.Start
		}
	}
	charge := admitted(ps, each)
	if !charge {
		uncharged(ps, each, req.Cost)
	}
	if !m.place(keys, idx, slots, steps, charge, dedup, nowMillis) {
		return Unavailable{Category: StoreFull}
	}
	m.write(req, keys, idx, slots, steps, each, id, charge, dedup, nowMillis)
	if charge && req.Phase == Admission && set.chargedByResponse {
		for k, p := range ps {
			if steps[k].charged && p.ChargedByResponse() {
				m.shards[keys[k][0]%memoryShards].holdReserve(keys[k], nowMillis+p.Algorithm.spec().reserveLife(p).Milliseconds())
			}
		}
	}
	if reserves && charge && req.Phase == Admission {
		if held := delay(ps, each); held > 0 {
			until := first.reserve(id, ps, steps, held, nowMillis)
			for k := range ps {
				if steps[k].charged {
					m.shards[keys[k][0]%memoryShards].keepUntil(keys[k], until)
				}
			}
		}
	}
	return evaluated(ps, each)
}

// lock takes the locks of the shards keys live in, in shard order, and
// returns them for unlock: one bit per shard (memoryShards is 64).
func (m *Memory) lock(keys []memoryKey) uint64 {
	var locked uint64
	for _, k := range keys {
		locked |= 1 << (k[0] % memoryShards)
	}
	for l := locked; l != 0; l &= l - 1 {
		m.shards[bits.TrailingZeros64(l)].mu.Lock()
	}
	return locked
}

func (m *Memory) unlock(locked uint64) {
	for l := locked; l != 0; l &= l - 1 {
		m.shards[bits.TrailingZeros64(l)].mu.Unlock()
	}
}

// find looks each of keys up, into idx and slots (0 and nil: none); an
// expired key is dropped, a live one becomes the most recently used.
func (m *Memory) find(keys []memoryKey, idx []uint32, slots []*memorySlot, nowMillis int64) {
	for k := range keys {
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
}

// recall reports whether every key remembers its policy's decision under
// id, each into each: the decision is then a replay.
func (m *Memory) recall(ps []*Policy, keys []memoryKey, idx []uint32, slots []*memorySlot, id evaluationKey, nowMillis int64, each []Decision) bool {
	for k, p := range ps {
		e := slots[k]
		if e == nil {
			return false
		}
		d, ok := m.shards[keys[k][0]%memoryShards].recall(idx[k], e, id, nowMillis, p)
		if !ok {
			return false
		}
		each[k] = d
	}
	return true
}

// write keeps what the decision of req changed: each charged policy's
// state (charge: the request was admitted) and its lease, and with
// de-duplication each policy's decision under id. Every key written has
// its slot (place).
func (m *Memory) write(req Request, keys []memoryKey, idx []uint32, slots []*memorySlot, steps []step, each []Decision, id evaluationKey, charge, dedup bool, nowMillis int64) {
	set := req.Policies
	for k, p := range set.list {
		res := steps[k]
		write := charge && res.charged
		if !write && !dedup {
			continue
		}
		s := &m.shards[keys[k][0]%memoryShards]
		i, e := idx[k], slots[k]
		if write {
			e.setState(res.next)
			e.expiresAt = max(e.expiresAt, nowMillis+res.ttlMillis)
			if p.HoldsLeases() {
				s.lease(keys[k], id, req.Cost, nowMillis+p.LeaseTTL.Milliseconds())
			}
		}
		if dedup {
			s.remember(i, e, id, len(req.EvaluationID), each[k], nowMillis, set.Dedup())
			e.expiresAt = max(e.expiresAt, nowMillis+set.Dedup().TTL.Milliseconds())
		}
	}
}

// place gives a slot to each key of the decision that has none and is
// written (its policy charged, or the decision remembered), before any is
// written: a shard full of live keys (insert) refuses the decision whole,
// and the keys placed for it go again (false). The shards' locks are held;
// no key of the decision is dropped to make room for another.
func (m *Memory) place(keys []memoryKey, idx []uint32, slots []*memorySlot, steps []step, charge, dedup bool, nowMillis int64) bool {
	var placedOn [scratchPolicies]int
	placed := placedOn[:0]
	for k := range keys {
		if slots[k] != nil || !(charge && steps[k].charged || dedup) {
			continue
		}
		s := &m.shards[keys[k][0]%memoryShards]
		i, e := s.insert(keys[k], &m.evictions, nowMillis, keys)
		if e == nil {
			for _, l := range placed {
				m.shards[keys[l][0]%memoryShards].remove(idx[l])
				idx[l], slots[l] = 0, nil
			}
			return false
		}
		idx[k], slots[k] = i, e
		placed = append(placed, k)
	}
	return true
}

// current is the state p decides on at nowMillis for key, held in slot e
// (nil: none): the slot's, and for a policy that holds leases the leases
// held as its count. The shard's lock is held.
func (s *memoryShard) current(key memoryKey, e *memorySlot, p *Policy, nowMillis int64) state {
	var st state
	if e != nil {
		st = e.state(p.Algorithm)
	}
	if p.HoldsLeases() {
		st.Count = s.held(key, nowMillis)
	}
	return st
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
