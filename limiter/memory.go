package limiter

import (
	"context"
	"hash/maphash"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Clock tells the time. Backends take one so tests can move time by hand.
type Clock interface {
	Now() time.Time
}

// systemClock is the process's wall clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// MemoryOptions configures a Memory backend.
type MemoryOptions struct {
	// MaxEntries caps the number of keys held. When full, the least recently
	// used key is dropped and counted in Evictions. Default 1,000,000.
	MaxEntries int
	// SweepInterval is how often expired keys are removed. Default 10s.
	SweepInterval time.Duration
	Clock         Clock
}

const memoryShards = 64

// Memory is the in-process backend: one gateway instance, the three
// algorithms of the Redis scripts, bounded memory with expiry. It is safe for
// concurrent use. Close stops its sweeper.
type Memory struct {
	clock     Clock
	seed      maphash.Seed
	shards    [memoryShards]memoryShard
	evictions atomic.Uint64
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

type memoryShard struct {
	mu         sync.Mutex
	entries    map[string]*memoryEntry
	maxEntries int
	// head is the most recently used entry, tail the least; the list is
	// intrusive so that touching a key allocates nothing.
	head, tail *memoryEntry
}

type memoryEntry struct {
	key        string
	st         state
	expiresAt  int64 // milliseconds
	dedup      map[string]dedupRecord
	dedupOrder []string // insertion order of the keys of dedup
	dedupBytes int
	prev, next *memoryEntry
}

type dedupRecord struct {
	decision  Decision
	expiresAt int64
}

// NewMemory returns a ready Memory backend.
func NewMemory(opts MemoryOptions) *Memory {
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = 1_000_000
	}
	if opts.SweepInterval <= 0 {
		opts.SweepInterval = 10 * time.Second
	}
	if opts.Clock == nil {
		opts.Clock = systemClock{}
	}
	m := &Memory{clock: opts.Clock, seed: maphash.MakeSeed(), stop: make(chan struct{}), done: make(chan struct{})}
	perShard := max(opts.MaxEntries/memoryShards, 1)
	for i := range m.shards {
		m.shards[i].entries = make(map[string]*memoryEntry)
		m.shards[i].maxEntries = perShard
	}
	go m.sweepEvery(opts.SweepInterval)
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
		n += len(s.entries)
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
	p := req.Policy
	nowMillis := m.clock.Now().UnixMilli()
	var keyBuf [160]byte
	key := appendMemoryKey(keyBuf[:0], p, req.Subject)
	s := &m.shards[maphash.Bytes(m.seed, key)%memoryShards]

	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[string(key)] // a lookup by converted bytes does not allocate
	if e != nil && e.expiresAt <= nowMillis {
		s.remove(e)
		e = nil
	}
	dedup := p.Dedup.Enabled && req.EvaluationID != ""
	if e != nil && dedup {
		if rec, ok := e.dedup[req.EvaluationID]; ok && rec.expiresAt > nowMillis {
			s.touch(e)
			return Evaluated{rec.decision}
		}
	}
	var st state
	if e != nil {
		st = e.st
	}
	res := decide(p, st, nowMillis, req.Cost)
	if res.clockUnsafe {
		return Unavailable{Category: ClockUnsafe}
	}
	if !res.charged && !dedup {
		if e != nil {
			s.touch(e)
		}
		return Evaluated{res.decision}
	}
	if e == nil {
		e = s.insert(string(key), &m.evictions, nowMillis)
	} else {
		s.touch(e)
	}
	if res.charged {
		e.st = res.next
		e.expiresAt = max(e.expiresAt, nowMillis+res.ttlMillis)
	}
	if dedup {
		e.remember(req.EvaluationID, res.decision, nowMillis, p.Dedup)
		e.expiresAt = max(e.expiresAt, nowMillis+p.Dedup.TTL.Milliseconds())
	}
	return Evaluated{res.decision}
}

// appendMemoryKey carries the policy revision, so a changed policy starts
// afresh.
func appendMemoryKey(b []byte, p *Policy, subject string) []byte {
	b = append(b, p.Name...)
	b = append(b, 0)
	b = strconv.AppendInt(b, p.Revision, 10)
	b = append(b, 0)
	return append(b, subject...)
}

// dedupRecordOverhead approximates what one remembered decision costs beside
// its evaluation ID, for the MaxBytes bound.
const dedupRecordOverhead = 64

func (e *memoryEntry) remember(id string, d Decision, now int64, opts Dedup) {
	if e.dedup == nil {
		e.dedup = make(map[string]dedupRecord)
	}
	size := len(id) + dedupRecordOverhead
	if size > opts.MaxBytes {
		return
	}
	// Every record of a key lives for the same TTL, so the order of insertion
	// is the order of expiry: drop from the front while expired or over a bound.
	for len(e.dedupOrder) > 0 {
		oldest := e.dedupOrder[0]
		if e.dedup[oldest].expiresAt > now && len(e.dedup) < opts.MaxEntries && e.dedupBytes+size <= opts.MaxBytes {
			break
		}
		delete(e.dedup, oldest)
		e.dedupBytes -= len(oldest) + dedupRecordOverhead
		e.dedupOrder = e.dedupOrder[1:]
	}
	e.dedup[id] = dedupRecord{decision: d, expiresAt: now + opts.TTL.Milliseconds()}
	e.dedupOrder = append(e.dedupOrder, id)
	e.dedupBytes += size
}

func (s *memoryShard) insert(key string, evictions *atomic.Uint64, now int64) *memoryEntry {
	for len(s.entries) >= s.maxEntries && s.tail != nil {
		victim := s.tail
		if victim.expiresAt > now {
			evictions.Add(1)
		}
		s.remove(victim)
	}
	e := &memoryEntry{key: key}
	s.entries[key] = e
	s.pushFront(e)
	return e
}

func (s *memoryShard) remove(e *memoryEntry) {
	delete(s.entries, e.key)
	s.unlink(e)
}

func (s *memoryShard) touch(e *memoryEntry) {
	if s.head == e {
		return
	}
	s.unlink(e)
	s.pushFront(e)
}

func (s *memoryShard) pushFront(e *memoryEntry) {
	e.prev, e.next = nil, s.head
	if s.head != nil {
		s.head.prev = e
	}
	s.head = e
	if s.tail == nil {
		s.tail = e
	}
}

func (s *memoryShard) unlink(e *memoryEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		s.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		s.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (m *Memory) sweepEvery(every time.Duration) {
	defer close(m.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.sweep()
		}
	}
}

// sweep removes every expired key now.
func (m *Memory) sweep() {
	now := m.clock.Now().UnixMilli()
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		for _, e := range s.entries {
			if e.expiresAt <= now {
				s.remove(e)
			}
		}
		s.mu.Unlock()
	}
}
