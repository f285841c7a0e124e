package limiter_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
)

// The remembered evaluations of a subject stay within every bound of its
// policy's dedup block, in Redis itself: no more records than max_entries,
// no more than max_bytes holds (RecordBytes each), none kept longer than
// ttl after the last or its state, whichever is longer; the newest is
// kept, and one long pushed out is charged again.
func TestRedisDedupMemoryStaysWithinItsBounds(t *testing.T) {
	s := redistest.Start(t)
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
	admin := s.Client(t)
	ctx := context.Background()
	id := func(i int) string { return "eval-" + strconv.Itoa(1000+i) }
	record := int64(limiter.RecordBytes(1))

	for _, tc := range []struct {
		name       string
		dedup      limiter.Dedup
		maxRecords int
	}{
		{"max_entries", limiter.Dedup{Enabled: true, TTL: 5 * time.Second, MaxEntries: 8, MaxBytes: 64 << 10}, 8},
		{"max_bytes", limiter.Dedup{Enabled: true, TTL: 5 * time.Second, MaxEntries: 256, MaxBytes: int(3*record + record/2)}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := limitertest.FixedWindow(1000, time.Minute)
			p.Clock = limiter.ClockBackend
			p.Dedup = tc.dedup
			subject := limitertest.Subject()
			remembered := r.Key(p, subject)
			const n = 100
			for i := 0; i < n; i++ {
				mustAllow(t, first(evaluateNew(r, p, subject, id(i))))
			}
			records := admin.HGetAll(ctx, remembered).Val()
			if records["n"] != strconv.Itoa(n) {
				t.Fatalf("n = %q, want %d records placed", records["n"], n)
			}
			for _, f := range []string{"s", "c", "p", "t", "n", "x"} {
				delete(records, f)
			}
			if len(records) != tc.maxRecords {
				t.Fatalf("%d records in Redis, want %d: %v", len(records), tc.maxRecords, records)
			}
			for place, rec := range records {
				if !regexp.MustCompile(`^\d{15},eval-\d+,1,\d+,\d+,0$`).MatchString(rec) {
					t.Fatalf("record %q in place %s, want expires,ID,allowed,remaining,reset,retry", rec, place)
				}
			}
			if ttl, most := admin.PTTL(ctx, remembered).Val(), max(p.Dedup.TTL, p.Window+p.CleanupGrace); ttl <= 0 || ttl > most {
				t.Fatalf("the records live %v, want at most %v", ttl, most)
			}
			// The newest is remembered and charged nothing; the first was
			// pushed out long ago and is charged again.
			if d := mustAllow(t, first(evaluate(r, p, subject, id(n-1)))); d.Remaining != 1000-n {
				t.Fatalf("newest ID: remaining %d, want %d", d.Remaining, 1000-n)
			}
			if d := mustAllow(t, first(evaluate(r, p, subject, id(0)))); d.Remaining != 1000-n-1 {
				t.Fatalf("pushed-out ID: remaining %d, want %d", d.Remaining, 1000-n-1)
			}
		})
	}
}

// The records are a ring: a retry finds its first result after as many
// later evaluations of the same subject as max_entries, less one, and not
// after one more. The gateway's IDs are new (looked for only by a
// retry); an ID its caller does not say is new is looked for first, and
// repeats its decision.
func TestRedisDedupKeepsTheNewestRecords(t *testing.T) {
	s := redistest.Start(t)
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
	// An hour: the decisions, under a second, rarely straddle a window's
	// end, which would move the remaining counts the records hold.
	p := limitertest.FixedWindow(100000, time.Hour)
	p.Clock = limiter.ClockBackend
	subject := limitertest.Subject()
	id := func(i int) string { return "0123456789abcdef01234567-" + strconv.FormatInt(int64(i), 36) }
	const n = 2000
	for i := 0; i < n; i++ {
		mustAllow(t, first(evaluateNew(r, p, subject, id(i))))
	}
	kept := p.Dedup.MaxEntries
	for i := n - kept; i < n; i++ {
		// Replayed: the first result, and nothing charged.
		if d := mustAllow(t, first(evaluate(r, p, subject, id(i)))); d.Remaining != int64(100000-i-1) {
			t.Fatalf("the retry of evaluation %d of %d: remaining %d, want %d (replayed)", i, n, d.Remaining, 100000-i-1)
		}
	}
	// Written over: decided again, and charged.
	if d := mustAllow(t, first(evaluate(r, p, subject, id(n-kept-1)))); d.Remaining != int64(100000-n-1) {
		t.Fatalf("the retry of evaluation %d of %d: remaining %d, want %d (charged again)", n-kept-1, n, d.Remaining, 100000-n-1)
	}
}

// A max_bytes at its least, below what one record counts as, still keeps
// one record: a retry right after its first try is not charged again.
func TestRedisDedupAtItsLeastKeepsOneRecord(t *testing.T) {
	s := redistest.Start(t)
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
	p := limitertest.FixedWindow(10, time.Minute)
	p.Clock = limiter.ClockBackend
	p.Dedup.MaxBytes = 128
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	subject := limitertest.Subject()
	mustAllow(t, first(evaluate(r, p, subject, "eval-1")))
	if d := mustAllow(t, first(evaluate(r, p, subject, "eval-1"))); d.Remaining != 9 {
		t.Fatalf("a retry: remaining %d, want 9 (replayed)", d.Remaining)
	}
}

// During a rolling upgrade instances of two releases share one Redis, so
// the keys and the state's fields keep the layout the release before
// wrote, and it reads them under the same names. A record of
// de-duplication is read only by a retry of its own evaluation, which the
// instance that made it sends, so its layout is this release's own: in
// the state's hash since this release (the release before kept them in
// a hash of their own, <key>:d, which this one neither reads nor writes).
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
	if len(fields) != 7 || fields["c"] != "1" || fields["p"] != "0" || fields["s"] == "" || fields["t"] == "" {
		t.Fatalf("state %v, want the fields s, c, p and t, and the records' n, x and 0", fields)
	}
	if fields["n"] != "1" || !regexp.MustCompile(`^\d{15},eval-1,1,9,\d+,0$`).MatchString(fields["0"]) || fields["x"] != strings.TrimLeft(fields["0"][:15], "0") {
		t.Fatalf("records %q, want n = 1, place 0: expires,ID,allowed,remaining,reset,retry, and x its expiry", fields)
	}
}

// A subject whose remembered evaluations have all expired, on any clock
// within max_clock_regression of Redis's, starts its ring over: its next
// record goes to place 0, and the places of the burst before that it does
// not write are emptied, so that a subject seen now and then keeps the
// records of its last burst, not a ring filled over the life of its
// state. A record not yet expired is kept.
func TestRedisDedupStartsTheRingOverOnceEveryRecordExpired(t *testing.T) {
	s := redistest.Start(t)
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
	admin := s.Client(t)
	ctx := context.Background()
	p := limitertest.FixedWindow(1000, time.Hour)
	p.Clock = limiter.ClockBackend
	p.Dedup.TTL = 300 * time.Millisecond
	p.MaxClockRegression = 200 * time.Millisecond
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	subject := limitertest.Subject()
	key := r.Key(p, subject)
	// Every charge in one window: the test counts them.
	clearOfWindowsEnd(t, admin, p.Window, 10*time.Second)
	for i := range 5 {
		mustAllow(t, first(evaluateNew(r, p, subject, fmt.Sprint("burst-", i))))
	}
	// Expired on Redis's clock, not on one behind it by the regression
	// allowed: the ring goes on.
	time.Sleep(p.Dedup.TTL + 50*time.Millisecond)
	mustAllow(t, first(evaluateNew(r, p, subject, "mid")))
	if n := admin.HGet(ctx, key, "n").Val(); n != "6" {
		t.Fatalf("n = %q after a record expired within the regression allowed, want 6 (the ring goes on)", n)
	}
	time.Sleep(p.Dedup.TTL + p.MaxClockRegression + 50*time.Millisecond)
	mustAllow(t, first(evaluateNew(r, p, subject, "later-0")))
	mustAllow(t, first(evaluateNew(r, p, subject, "later-1")))
	fields := admin.HGetAll(ctx, key).Val()
	if fields["n"] != "2" || !strings.Contains(fields["0"], ",later-0,") || !strings.Contains(fields["1"], ",later-1,") {
		t.Fatalf("fields %q, want n = 2 and the later records in places 0 and 1", fields)
	}
	for _, place := range []string{"2", "3", "4", "5"} {
		if rec, ok := fields[place]; !ok || rec != "" {
			t.Fatalf("place %s holds %q, want it emptied", place, rec)
		}
	}
	// Within the TTL the ring goes on: nothing is emptied, and a retry of
	// the newest is replayed.
	if d := mustAllow(t, first(evaluate(r, p, subject, "later-1"))); d.Remaining != 1000-8 {
		t.Fatalf("a retry of later-1: remaining %d, want %d (replayed)", d.Remaining, 1000-8)
	}
	if ttl := admin.PTTL(ctx, key).Val(); ttl <= p.CleanupGrace {
		t.Fatalf("TTL %v, want the state's (the window's rest and its grace)", ttl)
	}
}

// A ring of thousands of places starts over, and a retry reads it whole:
// its places go to Redis in pieces (a Lua unpack holds some 8,000
// values), and neither the subject nor the node fails.
func TestRedisDedupALargeRingStartsOverAndIsReadWhole(t *testing.T) {
	s := redistest.Start(t)
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
	p := limitertest.FixedWindow(1_000_000, time.Hour)
	p.Clock = limiter.ClockBackend
	p.Dedup = limiter.Dedup{Enabled: true, TTL: 50 * time.Millisecond, MaxEntries: 9000, MaxBytes: 2 << 20}
	p.MaxClockRegression = 0
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	subject := limitertest.Subject()
	for i := range 8500 {
		mustAllow(t, first(evaluateNew(r, p, subject, fmt.Sprint("burst-", i))))
	}
	time.Sleep(100 * time.Millisecond)
	mustAllow(t, first(evaluateNew(r, p, subject, "later")))
	fields := s.Client(t).HGetAll(context.Background(), r.Key(p, subject)).Val()
	if fields["n"] != "1" || fields["8499"] != "" || !strings.Contains(fields["0"], ",later,") {
		t.Fatalf("n = %q, place 8499 %q, place 0 %q: want the ring started over, the burst's places emptied", fields["n"], fields["8499"], fields["0"])
	}
	// A retry of the newest reads all 9,000 places, and is replayed.
	if d := mustAllow(t, first(evaluate(r, p, subject, "later"))); d.Remaining != 1_000_000-8501 {
		t.Fatalf("a retry: remaining %d, want %d (replayed)", d.Remaining, 1_000_000-8501)
	}
	mustAllow(t, first(evaluateNew(r, p, limitertest.Subject(), "another subject")))
}
