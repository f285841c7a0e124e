package limiter

import (
	"time"
)

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
		s.sweepReservations(now)
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
