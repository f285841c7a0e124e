package proxy

import (
	"sync"
	"time"
)

// denialLog bounds what a flood of denials writes to the access log: per
// route and subject, the first denial of each second is logged, with the
// number of its denials left out since the line before. Metrics still
// count every request. It holds at most maxDenialLogEntries subjects; when
// full it starts afresh, which costs only the left-out counts.
type denialLog struct {
	mu sync.Mutex
	m  map[denialLogKey]*denialLogEntry
}

const maxDenialLogEntries = 1 << 16

type denialLogKey struct{ route, pseudonym string }

type denialLogEntry struct {
	second  int64
	skipped int64
}

// admit reports whether this denial is logged, and how many of the same
// route and subject were left out since the last logged one.
func (d *denialLog) admit(route, pseudonym string, now time.Time) (log bool, skipped int64) {
	k := denialLogKey{route, pseudonym}
	sec := now.Unix()
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.m[k]
	if e == nil {
		if d.m == nil || len(d.m) >= maxDenialLogEntries {
			d.m = make(map[denialLogKey]*denialLogEntry)
		}
		d.m[k] = &denialLogEntry{second: sec}
		return true, 0
	}
	if e.second == sec {
		e.skipped++
		return false, 0
	}
	skipped, e.second, e.skipped = e.skipped, sec, 0
	return true, skipped
}
