package main

import (
	"os"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

func gcPercent(t *testing.T) uint64 {
	t.Helper()
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// With a live heap far under the floor the collector is told to wait for
// the floor; a GOGC the operator set is left alone.
func TestTheHeapFloorRaisesTheGCPercentForASmallHeap(t *testing.T) {
	if v, set := os.LookupEnv("GOGC"); set {
		os.Unsetenv("GOGC")
		t.Cleanup(func() { os.Setenv("GOGC", v) })
	}
	stop := keepHeapFloor()
	defer stop()
	deadline := time.Now().Add(5 * time.Second)
	for gcPercent(t) <= 100 {
		if time.Now().After(deadline) {
			t.Fatalf("GC percent %d after 5s of collections, want above 100 for a live heap under %d bytes", gcPercent(t), heapFloor)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if p := gcPercent(t); p != 100 {
		t.Fatalf("GC percent %d after stop, want 100", p)
	}

	t.Setenv("GOGC", "100")
	t.Cleanup(keepHeapFloor())
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if p := gcPercent(t); p != 100 {
		t.Fatalf("GC percent %d with GOGC set, want it left at 100", p)
	}
}
