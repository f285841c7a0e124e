package limiter_test

import (
	"context"
	"regexp"
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

// During a rolling upgrade instances of two releases share one Redis, so
// the keys, the state's fields and a one-policy request's record keep the
// layout the release before wrote (it reads them under the same names).
func TestRedisKeepsTheKeyLayoutOfTheReleaseBefore(t *testing.T) {
	s := redistest.Start(t)
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}, KeyPrefix: "rl:"})
	admin := s.Client(t)
	ctx := context.Background()
	p := limitertest.FixedWindow(10, time.Minute)
	p.Clock = limiter.ClockBackend
	subject := limitertest.Subject()
	mustAllow(t, first(evaluate(r, p, subject, "eval-1")))

	key := r.Key(p, subject)
	if want := "rl:{" + subject + "}:" + p.Name + ":" + strconv.FormatInt(p.Revision, 10); key != want {
		t.Fatalf("state key %s, want %s", key, want)
	}
	fields := admin.HGetAll(ctx, key).Val()
	if len(fields) != 5 || fields["c"] != "1" || fields["p"] != "0" || fields["s"] == "" || fields["t"] == "" || fields["eb"] == "" {
		t.Fatalf("state %v, want the fields s, c, p, t and eb", fields)
	}
	record := admin.Get(ctx, key+":e:eval-1").Val()
	if !regexp.MustCompile(`^\d+,1,9,\d+,0$`).MatchString(record) {
		t.Fatalf("record %q, want expires,allowed,remaining,reset,retry", record)
	}
	if ids := admin.LRange(ctx, key+":q", 0, -1).Val(); len(ids) != 1 || ids[0] != "eval-1" {
		t.Fatalf("remembered IDs %v, want [eval-1]", ids)
	}
}
