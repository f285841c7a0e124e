package edge

import (
	"sync"
	"time"
)

// LogThrottle bounds the log lines about what a client can repeat as fast
// as it likes (refused connections, refused requests), so that the log
// grows no faster than what the gateway lets through: per key, the first
// of each second is logged, and the next line logged carries the number
// left out in between. Metrics still count every one.
//
// It holds at most Max keys (default DefaultLogThrottleKeys); when full it
// starts afresh, which costs only the left-out counts, so that a client
// rotating addresses cannot grow it. The zero value is ready; it is safe
// for concurrent use.
type LogThrottle[K comparable] struct {
	Max int              // 0: DefaultLogThrottleKeys
	Now func() time.Time // nil: time.Now

	mu sync.Mutex
	m  map[K]logThrottleEntry
}

// DefaultLogThrottleKeys is LogThrottle.Max's default.
const DefaultLogThrottleKeys = 1 << 16

type logThrottleEntry struct {
	second  int64
	skipped int64
}

// Admit reports whether this one of k is logged, and how many like it
// were left out since the last one logged.
func (d *LogThrottle[K]) Admit(k K) (log bool, skipped int64) {
	now := time.Now
	if d.Now != nil {
		now = d.Now
	}
	sec := now().Unix()
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.m[k]
	if !ok {
		limit := d.Max
		if limit <= 0 {
			limit = DefaultLogThrottleKeys
		}
		if d.m == nil || len(d.m) >= limit {
			d.m = make(map[K]logThrottleEntry)
		}
		d.m[k] = logThrottleEntry{second: sec}
		return true, 0
	}
	if e.second == sec {
		e.skipped++
		d.m[k] = e
		return false, 0
	}
	d.m[k] = logThrottleEntry{second: sec}
	return true, e.skipped
}

// Len is the number of keys held.
func (d *LogThrottle[K]) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.m)
}
