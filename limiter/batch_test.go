package limiter

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// A merged command carries each call's keys and arguments once where the
// call before has them: what lua/driver.lua reads back. (The calls'
// decisions against Redis: redis_batch_test.go.)
func TestMergedSendsWhatEachCallAdds(t *testing.T) {
	s := &script{sha: "sha"}
	hot, other := []string{"{a}:p:1"}, []string{"{b}:p:1", "{b}:q:1"}
	newCall := func(keys []string, args ...any) *call { return &call{cmd: s.call(keys, args)} }
	calls := []*call{
		newCall(hot, 1, int64(5), "", "id1"),
		newCall(hot, 1, int64(5), "", "id2"),        // the hot key again: only its ID
		newCall(other, 1, int64(5), "", "x", "id3"), // other keys, one argument more
		newCall(other, 1, int64(6), "", "x", "id4"), // a cost of its own
		newCall(hot, 1, int64(5), "", "id5"),        // back to the first keys
	}
	got := merged(nil, calls)
	want := []any{"evalsha", &s.sha, 4, &hot[0], &other[0], &other[1], &hot[0], "b", 5,
		1, 4, 0, 1, int64(5), "", "id1",
		0, 4, 3, "id2",
		2, 5, 3, "x", "id3",
		0, 5, 1, int64(6), "", "x", "id4",
		1, 4, 1, int64(5), "", "id5",
	}
	if !slices.EqualFunc(got, want, sameArg) {
		t.Fatalf("merged:\n got %v\nwant %v", got, want)
	}
	// Arguments of kinds not compared by value are sent again.
	odd := []*call{newCall(hot, []byte("x"), "id1"), newCall(hot, []byte("x"), "id2")}
	if n := len(merged(nil, odd)); n != cmdHead+1+2+2*(3+2) {
		t.Errorf("merged with []byte arguments has %d arguments, want them all sent", n)
	}
}

// A call made once its batcher is closed (its node left, or the limiter
// closed) fails at once, as never sent, with a deadline or without.
func TestACallToAClosedBatcherIsNotSent(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	b := newBatcher(client, nil, false, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sizes"}))
	b.close()
	bounded, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	for name, ctx := range map[string]context.Context{"with a deadline": bounded, "without": context.Background()} {
		done := make(chan error, 1)
		go func() {
			_, _, err := b.evalSha(ctx, []any{"evalsha", "sha", 0})
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, errNotSent) || !errors.Is(err, redis.ErrClosed) {
				t.Errorf("%s: err %v, want not sent, closed", name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: a call to a closed batcher still waits after 5s", name)
		}
	}
}
