package series

import (
	"sync"
	"sync/atomic"
	"testing"
)

// Each key is bound once, however many requests ask for it at the same
// time, and every request gets the one series bound.
func TestEachKeyIsBoundOnce(t *testing.T) {
	var b Bound[int, *int]
	var binds [8]atomic.Int32
	bind := func(k int) *int {
		binds[k].Add(1)
		v := k
		return &v
	}
	got := make([][8]*int, 32)
	var wg sync.WaitGroup
	for g := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 8 {
				got[g][k] = b.Get(k, bind)
			}
		}()
	}
	wg.Wait()
	for k := range 8 {
		if n := binds[k].Load(); n != 1 {
			t.Errorf("key %d bound %d times, want once", k, n)
		}
		for g := range got {
			if got[g][k] != got[0][k] || *got[g][k] != k {
				t.Fatalf("request %d got another series for key %d", g, k)
			}
		}
	}
}
