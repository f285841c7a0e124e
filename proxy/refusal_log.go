package proxy

import (
	"net/netip"
	"sync"
	"time"
	"unicode/utf8"
)

// refusalLog bounds what requests that forward nothing (denials, refusals,
// invalid tokens, no route, limiter failures) write to the access log, so
// that the log grows no faster than the limiter lets requests through: per
// route, client and outcome, the first of each second is logged, and the
// next line logged carries the number left out in between. Metrics still
// count every request.
//
// It holds at most max keys (default maxRefusalLogEntries); when full it
// starts afresh, which costs only the left-out counts, so that a client
// rotating addresses cannot grow it.
type refusalLog struct {
	mu  sync.Mutex
	m   map[refusalLogKey]refusalLogEntry
	max int              // 0: maxRefusalLogEntries
	now func() time.Time // nil: time.Now
}

const maxRefusalLogEntries = 1 << 16

// refusalLogKey names the requests one line stands for. The client is the
// subject's pseudonym, or for a request that has none (no route, a
// refusal before the subject is known), the client's address prefix,
// which stays in memory and is never logged.
// The reason (why a token was refused) counts as part of the outcome: a
// fixed set, so that every kind of refusal still shows.
type refusalLogKey struct {
	route, outcome, reason string
	pseudonym              string
	client                 netip.Prefix
}

type refusalLogEntry struct {
	second  int64
	skipped int64
}

// admit reports whether this request is logged, and how many like it were
// left out since the last one logged.
func (d *refusalLog) admit(k refusalLogKey) (log bool, skipped int64) {
	now := time.Now
	if d.now != nil {
		now = d.now
	}
	sec := now().Unix()
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.m[k]
	if !ok {
		limit := d.max
		if limit <= 0 {
			limit = maxRefusalLogEntries
		}
		if d.m == nil || len(d.m) >= limit {
			d.m = make(map[refusalLogKey]refusalLogEntry)
		}
		d.m[k] = refusalLogEntry{second: sec}
		return true, 0
	}
	if e.second == sec {
		e.skipped++
		d.m[k] = e
		return false, 0
	}
	d.m[k] = refusalLogEntry{second: sec}
	return true, e.skipped
}

// size is the number of keys held.
func (d *refusalLog) size() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.m)
}

// maxLogField is the most bytes an access log field holds: nothing a
// client sends is logged whole.
const maxLogField = 256

// clampField cuts s to maxLogField bytes, on a character boundary.
func clampField(s string) string {
	if len(s) <= maxLogField {
		return s
	}
	i := maxLogField
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}
