package limiter

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// A shard's index under keys that share tags, whole first halves and
// homes, inserted and removed at random and evicted when full: every key
// held is found, every other is not, and the structure holds after each
// step.
func TestTheSlotIndexHoldsKeysThatShareTagsAndHomes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := &memoryShard{maxEntries: 40, slotsUsed: 1, queues: make([]recordQueue, 1)}
	s.index.grow()
	var evictions evictionCounts
	// 8 tags (so 8 homes at most), 4 first halves a tag, 4 keys a half.
	key := func(n int) memoryKey {
		var k memoryKey
		tag, half, rest := n%8, n/8%4, n/32
		binary.LittleEndian.PutUint64(k[:8], uint64(tag)<<32|uint64(half))
		binary.LittleEndian.PutUint64(k[8:], uint64(rest))
		return k
	}
	held := map[memoryKey]uint32{}
	for step := range 20_000 {
		k := key(rng.IntN(128))
		i, e := s.find(k)
		if want, ok := held[k]; ok != (e != nil) || i != want {
			t.Fatalf("step %d: key %x found at %d, want %d (held %t)", step, k, i, want, ok)
		}
		switch {
		case e == nil:
			i, _ = s.insert(k, &evictions, 0, nil)
			held[k] = i
		case rng.IntN(2) == 0:
			s.remove(i)
			delete(held, k)
		}
		// Evicted keys are gone from the index.
		for k, i := range held {
			if e := s.slot(i); e.flags&slotInUse == 0 || e.key != k {
				delete(held, k)
			}
		}
		if err := s.checkStructure(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	if s.len() != len(held) {
		t.Fatalf("%d keys indexed, %d held", s.len(), len(held))
	}
}
