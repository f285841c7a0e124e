package limiter

import (
	"slices"
	"sync"
	"unsafe"
)

// memoryShard holds the keys whose hash selects it. Slots are addressed by
// index, 0 meaning none, and live in pages that never move, so a pointer to
// one stays valid while the lock is held. Queues are addressed the same way,
// but their slice moves when it grows: no pointer to one outlives newQueue.
type memoryShard struct {
	mu         sync.Mutex
	maxEntries int

	// index finds the slot of each key held.
	index     slotIndex
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
	// leases are the concurrency leases of the shard's keys (leases.go);
	// a key's go with its slot.
	leases map[memoryKey]map[evaluationKey]heldLease
	// reservations are the reservation records of the delayed requests
	// whose first policy's key is the shard's (delay.go); nil until one.
	reservations map[evaluationKey]reservation
	// overrides are the overrides in force of the shard's keys
	// (memory_overrides.go); nil until one.
	overrides map[memoryKey]memoryOverride
	// reservedUntil is, for each of the shard's keys charged for a place
	// a delayed request holds, when the last such place is void: till
	// then the key is live. nil until one.
	reservedUntil map[memoryKey]int64
	// reserves are the holds of the shard's keys that response-charged
	// policies reserved on for requests in flight (memory_reserves.go).
	// nil until one.
	reserves map[memoryKey]reserveHold
}

// paddedShard keeps each shard's lock and list heads off its neighbours'
// cache lines (two, for the adjacent-line prefetcher).
type paddedShard struct {
	memoryShard
	_ [128 - unsafe.Sizeof(memoryShard{})%128]byte
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

// Slots come in pages of one 8 KiB size class.
const (
	slotsPerPage = 64
	slotPageMask = slotsPerPage - 1
	slotPageBits = 6
)

type slotPage [slotsPerPage]memorySlot

// A page must not outgrow its size class.
var _ = [128 - unsafe.Sizeof(memorySlot{})]struct{}{}

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
	h := key.half()
	x := &s.index
	mask := uint64(len(x.entries) - 1)
	for p := indexHome(h) & mask; ; p = (p + 1) & mask {
		en := x.entries[p]
		if en == 0 {
			return 0, nil
		}
		if en>>32 == h>>32 {
			if i := uint32(en); s.slot(i).key == key {
				return i, s.slot(i)
			}
		}
	}
}

func (s *memoryShard) len() int { return s.index.n }

// insert gives key a slot, dropping the least recently used keys while the
// shard is full. A key that holds anything live (live), or that the same
// decision needs (keep), is never dropped: it goes to the front instead.
// When every key held is live, insert refuses: 0 and nil. When some are
// only the decision's own, the shard holds more than its cap, by at most
// the decision's keys, until a later insert drops them.
func (s *memoryShard) insert(key memoryKey, counts *evictionCounts, now int64, keep []memoryKey) (uint32, *memorySlot) {
	for spared, kept := 0, false; s.len() >= s.maxEntries && s.tail != 0; {
		victim := s.tail
		e := s.slot(victim)
		if live := s.live(e, now); live || slices.Contains(keep, e.key) {
			kept = kept || !live
			if spared++; spared >= s.len() {
				if kept {
					break
				}
				counts.refused.Add(1)
				return 0, nil
			}
			s.touch(victim, e)
			continue
		}
		if e.expiresAt > now {
			counts.evicted.Add(1)
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
	s.index.add(key.half(), i)
	s.pushFront(i, e)
	return i, e
}

// remove frees slot i and every evaluation its key remembers.
func (s *memoryShard) remove(i uint32) {
	e := s.slot(i)
	if len(s.leases) != 0 {
		delete(s.leases, e.key)
	}
	if len(s.reservedUntil) != 0 {
		delete(s.reservedUntil, e.key)
	}
	if len(s.reserves) != 0 {
		delete(s.reserves, e.key)
	}
	s.index.delete(e.key.half(), i)
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

// live reports whether slot e's key holds something a request in flight
// depends on at now: a concurrency lease, a delayed request's reserved
// place, or the reserve of a request whose response will charge it.
// Dropping it would give the subject a fresh budget while those requests
// still count against the old one.
func (s *memoryShard) live(e *memorySlot, now int64) bool {
	return s.reservedUntil[e.key] > now || s.reserveHeld(e.key, now) || len(s.leases[e.key]) > 0 && s.held(e.key, now) > 0
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

// slotIndex finds a shard's slots by their keys: open addressing with
// linear probing over a power-of-two table, at most half full, of entries
// that are each the first 32 bits of a key's first half (its tag) over
// the number of its slot; 0, which is no slot's number, is an empty entry.
// A key is looked for from its home, the position its tag gives, to the
// first empty entry, and an entry whose tag matches is the key's when the
// slot holds it in full: keys that share a tag, or their whole first half,
// are held side by side. It reads a cache line or two where a Go map of
// the shard's size reads three or four, which is what a subject not seen
// lately costs: none of them is in the cache.
type slotIndex struct {
	entries []uint64
	n       int // entries in use
}

// indexHome is where the key whose first half is h is looked for first;
// an entry's home is its tag's, so that it can move without its key.
func indexHome(h uint64) uint64 { return h >> 32 }

// minIndexEntries is the size of a shard's index when it holds no key.
const minIndexEntries = 16

// add indexes slot i under its key's first half h, which must not be
// indexed under i already.
func (x *slotIndex) add(h uint64, i uint32) {
	if 2*(x.n+1) > len(x.entries) {
		x.grow()
	}
	x.put(h&^(1<<32-1) | uint64(i))
	x.n++
}

// put writes entry en at the first empty entry from its home.
func (x *slotIndex) put(en uint64) {
	mask := uint64(len(x.entries) - 1)
	p := indexHome(en) & mask
	for x.entries[p] != 0 {
		p = (p + 1) & mask
	}
	x.entries[p] = en
}

// grow doubles the table, at least to minIndexEntries.
func (x *slotIndex) grow() {
	old := x.entries
	x.entries = make([]uint64, max(2*len(old), minIndexEntries))
	for _, en := range old {
		if en != 0 {
			x.put(en)
		}
	}
}

// delete drops the entry of slot i, whose key's first half is h, and
// moves back each entry after it that its hole would hide from a search
// from that entry's home (deletion without tombstones).
func (x *slotIndex) delete(h uint64, i uint32) {
	mask := uint64(len(x.entries) - 1)
	p := indexHome(h) & mask
	for uint32(x.entries[p]) != i {
		p = (p + 1) & mask
	}
	for q := p; ; {
		x.entries[p] = 0
		for {
			q = (q + 1) & mask
			en := x.entries[q]
			if en == 0 {
				x.n--
				return
			}
			// en may fill the hole at p when its home is not within
			// (p, q], going round.
			if home := indexHome(en) & mask; (q-home)&mask >= (q-p)&mask {
				x.entries[p] = en
				p = q
				break
			}
		}
	}
}
