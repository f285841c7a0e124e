package limiter_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
)

// The remembered evaluations of a subject stay within every bound of its
// policy's dedup block, in Redis itself: no more records than max_entries,
// no more bytes than max_bytes, none older than ttl, and the newest are the
// ones kept.
func TestRedisDedupMemoryStaysWithinItsBounds(t *testing.T) {
	s := redistest.Start(t)
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
	admin := s.Client(t)
	ctx := context.Background()
	id := func(i int) string { return "eval-" + strconv.Itoa(1000+i) }
	// A record's size is counted as its key, its ID and 128 bytes.
	size := func(key string) int64 { return int64(len(key)+len(":e:")+2*len(id(0))) + 128 }

	for _, tc := range []struct {
		name       string
		dedup      limiter.Dedup
		maxRecords int
	}{
		{"max_entries", limiter.Dedup{Enabled: true, TTL: 5 * time.Second, MaxEntries: 8, MaxBytes: 64 << 10}, 8},
		{"max_bytes", limiter.Dedup{Enabled: true, TTL: 5 * time.Second, MaxEntries: 256}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := limitertest.FixedWindow(1000, time.Minute)
			p.Clock = limiter.ClockBackend
			subject := limitertest.Subject()
			key := r.Key(p, subject)
			p.Dedup = tc.dedup
			if p.Dedup.MaxBytes == 0 {
				p.Dedup.MaxBytes = int(3*size(key) + size(key)/2)
			}
			const n = 100
			for i := 0; i < n; i++ {
				mustAllow(t, first(evaluate(r, p, subject, id(i))))
			}
			if got := admin.LLen(ctx, key+":q").Val(); got != int64(tc.maxRecords) {
				t.Fatalf("%d IDs listed, want %d", got, tc.maxRecords)
			}
			records := admin.Keys(ctx, key+":e:*").Val()
			if len(records) != tc.maxRecords {
				t.Fatalf("%d records in Redis, want %d: %v", len(records), tc.maxRecords, records)
			}
			for _, rec := range records {
				if ttl := admin.PTTL(ctx, rec).Val(); ttl <= 0 || ttl > p.Dedup.TTL {
					t.Fatalf("record %s lives %v, want at most %v", rec, ttl, p.Dedup.TTL)
				}
			}
			bytes, _ := admin.HGet(ctx, key, "eb").Int64()
			if want := int64(tc.maxRecords) * size(key); bytes != want || bytes > int64(p.Dedup.MaxBytes) {
				t.Fatalf("%d bytes counted, want %d, at most %d", bytes, want, p.Dedup.MaxBytes)
			}
			// The newest are remembered and charged nothing; the one before
			// them was pushed out and is charged again.
			if d := mustAllow(t, first(evaluate(r, p, subject, id(n-1)))); d.Remaining != 1000-n {
				t.Fatalf("newest ID: remaining %d, want %d", d.Remaining, 1000-n)
			}
			if d := mustAllow(t, first(evaluate(r, p, subject, id(n-1-tc.maxRecords)))); d.Remaining != 1000-n-1 {
				t.Fatalf("pushed-out ID: remaining %d, want %d", d.Remaining, 1000-n-1)
			}
		})
	}
}
