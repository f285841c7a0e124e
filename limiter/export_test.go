package limiter

import (
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Test-only access to internals, for the external test package.

// Len reports how many subjects the memory backend holds.
func (m *Memory) Len() int { return m.entries() }

// Sweep removes every expired entry now.
func (m *Memory) Sweep() { m.sweep() }

// Key is the Redis key a policy and subject are counted under.
func (r *Redis) Key(p *Policy, subject string) string { return r.key(MustPolicySet(p), 0, subject) }

// ClassifyRedisError maps a go-redis error to its metric cause and outcome.
var ClassifyRedisError = classifyRedisError

// RedisErrorCauses are the causes gateway_redis_errors_total exports from
// the start; ErrNotSent and ErrCircuitOpen two errors of the limiter's own.
var (
	RedisErrorCauses = redisErrorCauses
	ErrNotSent       = errNotSent
	ErrCircuitOpen   = errCircuitOpen
)

// EvaluateKeyed decides req as if its policy and subject hashed to key, so
// that a test can make keys share their first half. The evaluation ID is
// hashed as usual.
func (m *Memory) EvaluateKeyed(req Request, key [16]byte) Outcome {
	return m.evaluate(req, []memoryKey{key})
}

// RecordsScanned is the longest queue of remembered evaluations a key keeps
// without indexing it.
const RecordsScanned = recordsScanned

// Remembered reports how many evaluations the memory backend remembers.
func (m *Memory) Remembered() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		for j := uint32(1); j < s.slotsUsed; j++ {
			if e := s.slot(j); e.flags&lastHeld != 0 {
				n += 1 + int(s.queues[e.queue].n)
			}
		}
		s.mu.Unlock()
	}
	return n
}

// CheckStructure reports the first broken invariant of the memory backend's
// index, LRU list, free lists and remembered evaluations.
func (m *Memory) CheckStructure() error {
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		err := s.checkStructure()
		s.mu.Unlock()
		if err != nil {
			return fmt.Errorf("shard %d: %w", i, err)
		}
	}
	return nil
}

func (s *memoryShard) checkStructure() error {
	if s.len() > s.maxEntries {
		return fmt.Errorf("%d keys held, cap %d", s.len(), s.maxEntries)
	}
	held := map[uint32]bool{}
	x := &s.index
	mask := uint64(len(x.entries) - 1)
	inUse := 0
	for p, en := range x.entries {
		if en == 0 {
			continue
		}
		inUse++
		i := uint32(en)
		if i == 0 || i >= s.slotsUsed || held[i] {
			return fmt.Errorf("index points at slot %d of %d, or twice", i, s.slotsUsed)
		}
		e := s.slot(i)
		if e.flags&slotInUse == 0 || e.key.half()>>32 != en>>32 {
			return fmt.Errorf("slot %d is not the one its key is indexed under", i)
		}
		// No empty entry lies between the entry's home and the entry.
		for q := indexHome(en) & mask; q != uint64(p); q = (q + 1) & mask {
			if x.entries[q] == 0 {
				return fmt.Errorf("slot %d is indexed past an empty entry from its home", i)
			}
		}
		held[i] = true
	}
	if inUse != x.n || 2*x.n > len(x.entries) || len(x.entries)&(len(x.entries)-1) != 0 {
		return fmt.Errorf("index holds %d entries, counts %d, of %d", inUse, x.n, len(x.entries))
	}
	listed := 0
	for i, newer := s.head, uint32(0); i != 0; newer, i = i, s.slot(i).lessRecent {
		e := s.slot(i)
		if j, _ := s.find(e.key); e.flags&slotInUse == 0 || j != i {
			return fmt.Errorf("LRU list holds slot %d, which is not in use", i)
		}
		if e.moreRecent != newer {
			return fmt.Errorf("slot %d links back to %d, not %d", i, e.moreRecent, newer)
		}
		if e.lessRecent == 0 && s.tail != i {
			return fmt.Errorf("list ends at %d, tail is %d", i, s.tail)
		}
		if listed++; listed > s.len() {
			return errors.New("LRU list longer than the index")
		}
	}
	if listed != s.len() {
		return fmt.Errorf("LRU list holds %d slots, index %d", listed, s.len())
	}
	free := 0
	for i := s.freeSlot; i != 0; i = s.slot(i).lessRecent {
		if e := s.slot(i); e.flags != 0 || e.queue != 0 {
			return fmt.Errorf("free slot %d is marked in use", i)
		}
		if free++; free > int(s.slotsUsed) {
			return errors.New("free slot list loops")
		}
	}
	if listed+free != int(s.slotsUsed)-1 {
		return fmt.Errorf("%d slots in use and %d free, %d handed out", listed, free, s.slotsUsed-1)
	}

	owned := map[uint32]bool{}
	indexed := 0
	for i := range held {
		e := s.slot(i)
		if e.queue == 0 {
			continue
		}
		if e.flags&lastHeld == 0 {
			return fmt.Errorf("slot %d has a queue but no newest evaluation", i)
		}
		if owned[e.queue] {
			return fmt.Errorf("queue %d has two keys", e.queue)
		}
		owned[e.queue] = true
		q := &s.queues[e.queue]
		size := uint32(len(q.ids))
		if q.n == 0 || q.n > size || size&(size-1) != 0 || len(q.decisions) != len(q.ids) {
			return fmt.Errorf("slot %d: queue of %d in rings of %d and %d", i, q.n, len(q.ids), len(q.decisions))
		}
		if !q.indexed && q.n > recordsScanned {
			return fmt.Errorf("slot %d holds %d records unindexed", i, q.n)
		}
		bytes := uint32(0)
		for j := range q.n {
			seq := q.first + j
			at := seq & (size - 1)
			bytes += q.decisions[at].size
			if !q.indexed {
				continue
			}
			got, ok := s.recordIndex[recordKey{q.ids[at], i}]
			if !ok || got-q.first >= q.n || q.ids[got&(size-1)] != q.ids[at] || got-seq >= q.n {
				return fmt.Errorf("slot %d: record %d is indexed as %d (%v)", i, seq, got, ok)
			}
			if got == seq {
				indexed++
			}
		}
		if bytes != q.bytes {
			return fmt.Errorf("slot %d: queue counts %d bytes, holds %d", i, q.bytes, bytes)
		}
	}
	if indexed != len(s.recordIndex) {
		return fmt.Errorf("%d records indexed, index holds %d", indexed, len(s.recordIndex))
	}
	for _, q := range s.freeQueues {
		if owned[q] || s.queues[q].ids != nil {
			return fmt.Errorf("free queue %d is in use", q)
		}
		owned[q] = true
	}
	if len(owned) != len(s.queues)-1 {
		return fmt.Errorf("%d queues owned or free, %d made", len(owned), len(s.queues)-1)
	}
	return nil
}

// SameShard reports whether the memory backend keeps the keys of p and q
// for subject in one shard.
func (m *Memory) SameShard(p, q *Policy, subject string) bool {
	a := m.sum(appendMemoryKey(nil, p, subject))
	b := m.sum(appendMemoryKey(nil, q, subject))
	return a[0]%memoryShards == b[0]%memoryShards
}

// Client is the backend's go-redis client, for a test to hook its dials.
func (r *Redis) Client() redis.UniversalClient { return r.client }

// RecordBytes is what one remembered evaluation of a request of n policies
// counts against dedup.max_bytes on Redis.
var RecordBytes = recordBytes
