package overload_test

import (
	"context"
	"testing"
	"time"

	"github.com/edgegate/gateway/overload"
)

// simulation drives a Controller on a fake clock against a model of a
// backend: workers serving service each, a FIFO in front of them, so a
// request admitted with n in flight takes service × max(1, n/workers).
// Demand is always above the limit.
type simulation struct {
	c       *overload.Controller
	now     time.Time
	workers int
	service time.Duration
}

func newSimulation(t *testing.T, minLimit, maxInFlight, workers int) *simulation {
	s := &simulation{now: time.Unix(1000, 0), workers: workers, service: 20 * time.Millisecond}
	s.c = newController(t, overload.Options{Adaptive: true, MinLimit: minLimit, MaxInFlight: maxInFlight, Queue: -1,
		Now: func() time.Time { return s.now }})
	return s
}

// run fills the limit and releases one request at a time, each after its
// modelled latency, until d has passed; it returns the lowest and highest
// limit seen in the last second.
func (s *simulation) run(d time.Duration) (lo, hi int) {
	type flight struct {
		a   overload.Admission
		end time.Time
	}
	var inFlight []flight
	end := s.now.Add(d)
	lo = 1 << 30
	for s.now.Before(end) {
		for {
			a, r := s.c.Admit(context.Background(), overload.Default, "t")
			if r != overload.Admitted {
				break
			}
			n := s.c.InFlight()
			lat := s.service * time.Duration(max(n, s.workers)) / time.Duration(s.workers)
			inFlight = append(inFlight, flight{a, s.now.Add(lat)})
		}
		// The earliest to end.
		first := 0
		for i, f := range inFlight {
			if f.end.Before(inFlight[first].end) {
				first = i
			}
		}
		f := inFlight[first]
		inFlight = append(inFlight[:first], inFlight[first+1:]...)
		if f.end.After(s.now) {
			s.now = f.end
		}
		f.a.Release()
		if end.Sub(s.now) < time.Second {
			l := s.c.Limit()
			lo, hi = min(lo, l), max(hi, l)
		}
	}
	for _, f := range inFlight {
		f.a.Release()
	}
	return lo, hi
}

func TestAdaptiveLimit(t *testing.T) {
	t.Run("the limit settles where the backend queues a little, falls within 5s when its capacity halves and comes back with it", func(t *testing.T) {
		s := newSimulation(t, 4, 64, 8)
		if l := s.c.Limit(); l != 4 {
			t.Fatalf("limit %d before any latency is known, want min_limit 4", l)
		}
		lo, hi := s.run(8 * time.Second)
		if lo < 9 || hi > 16 {
			t.Fatalf("limit between %d and %d against 8 workers, want within [9, 16]", lo, hi)
		}
		s.workers = 4
		lo, hi = s.run(5 * time.Second)
		if hi > 8 || lo < 4 {
			t.Fatalf("limit between %d and %d in the last second of 5 against 4 workers, want within [4, 8]", lo, hi)
		}
		s.workers = 8
		lo, _ = s.run(5 * time.Second)
		if lo < 9 {
			t.Fatalf("limit fell to %d in the last second of 5 with 8 workers back, want at least 9", lo)
		}
	})
	t.Run("a backend slower even unloaded gets its limit back once a probe measures its new baseline", func(t *testing.T) {
		s := newSimulation(t, 4, 64, 8)
		s.run(5 * time.Second)
		s.service = 40 * time.Millisecond
		if _, hi := s.run(5 * time.Second); hi > 6 {
			t.Fatalf("limit up to %d with every request twice the baseline, want it near min_limit 4", hi)
		}
		if lo, hi := s.run(40 * time.Second); lo < 9 || hi > 16 {
			t.Fatalf("limit between %d and %d after a probe's interval, want within [9, 16]", lo, hi)
		}
	})
	t.Run("the limit stays within min_limit and max_in_flight", func(t *testing.T) {
		s := newSimulation(t, 6, 10, 100)
		if _, hi := s.run(5 * time.Second); hi != 10 {
			t.Fatalf("limit at most %d against a backend that never queues, want max_in_flight 10", hi)
		}
		s.workers = 1
		if lo, _ := s.run(5 * time.Second); lo != 6 {
			t.Fatalf("limit at least %d against a backend of one worker, want min_limit 6", lo)
		}
	})
	t.Run("a limit nobody reaches does not grow", func(t *testing.T) {
		now := time.Unix(1000, 0)
		c := newController(t, overload.Options{Adaptive: true, MinLimit: 4, MaxInFlight: 64, Now: func() time.Time { return now }})
		for range 1000 {
			a, r := c.Admit(context.Background(), overload.Default, "t")
			if r != overload.Admitted {
				t.Fatal(r)
			}
			now = now.Add(20 * time.Millisecond)
			a.Release()
		}
		if l := c.Limit(); l != 4 {
			t.Fatalf("limit %d after a request at a time, want 4", l)
		}
	})
}
