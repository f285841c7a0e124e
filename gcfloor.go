package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// heapFloor is the heap the garbage collector lets the gateway grow to
// before it collects, however little of it is live. The Go default
// (GOGC=100) collects when the heap doubles its live part: a gateway's
// live heap is a few MB when its limiter holds few keys, so it collected
// 25 to 35 times a second under load, and collection and allocation took
// about 7.5% of its CPU per request. Past the floor the default applies
// unchanged: a heap of 145 MB of memory-limiter keys still doubles.
const heapFloor = 64 << 20

// keepHeapFloor sets, after every collection, the GC percentage that puts
// the next one at heapFloor or at twice the live heap, whichever is
// larger. A GOGC the operator set wins: nothing is changed then. stop
// ends it (tests).
func keepHeapFloor() (stop func()) {
	if _, set := os.LookupEnv("GOGC"); set {
		return func() {}
	}
	var stopped atomic.Bool
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	percent := 100
	var arm func()
	arm = func() {
		// A finalizer runs once after the collection that found its object
		// unreachable: one call per cycle, re-armed by itself.
		runtime.SetFinalizer(new([16]byte), func(*[16]byte) {
			if stopped.Load() {
				return
			}
			metrics.Read(sample)
			live := sample[0].Value.Uint64()
			want := 100
			if live > 0 && live < heapFloor/2 {
				want = int(heapFloor*100/live) - 100
			}
			// Only a change of a tenth or more: each setting costs a lock.
			if want > percent*11/10 || want < percent*9/10 {
				percent = want
				debug.SetGCPercent(want)
			}
			arm()
		})
	}
	arm()
	return func() {
		stopped.Store(true)
		debug.SetGCPercent(100)
	}
}
