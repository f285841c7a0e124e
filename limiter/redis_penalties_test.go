package limiter_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
)

// An instance that starts after a penalty was imposed finds it, from the
// hash read when it subscribes; a field past its end is neither loaded nor
// kept; and after a Redis restart that lost the hash, the penalty an
// instance holds still ends at its time, and the resubscription brings
// back nothing that ended.
func TestRedisPenaltiesOutliveNothing(t *testing.T) {
	s := redistest.Start(t)
	opts := limiter.RedisOptions{Addrs: []string{s.Addr}}
	a := redistest.NewLimiter(t, opts)
	subj, ended := limitertest.Subject(), limitertest.Subject()
	now := time.Now()
	ctx := context.Background()
	if err := a.Penalties().Impose(ctx, limiter.Penalty{Route: "r", Policy: "p", Pseudonym: subj, Start: now, Until: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	// A field that ended a minute ago, as a restarted instance could
	// find it.
	old, _ := json.Marshal(map[string]any{"route": "r", "policy": "p", "pseudonym": ended,
		"start": now.Add(-time.Hour), "until": now.Add(-time.Minute)})
	admin := s.Client(t)
	if err := admin.HSet(ctx, "rl:penalties", "r\x00"+ended, old).Err(); err != nil {
		t.Fatal(err)
	}
	b := redistest.NewLimiter(t, opts)
	if !eventually(time.Second, func() bool { _, ok := b.Penalties().Find("r", subj, time.Now()); return ok }) {
		t.Fatal("an instance started after the penalty does not find it")
	}
	if _, ok := b.Penalties().Find("r", ended, time.Now()); ok {
		t.Fatal("an ended penalty was loaded")
	}
	if !eventually(time.Second, func() bool { return !admin.HExists(ctx, "rl:penalties", "r\x00"+ended).Val() }) {
		t.Fatal("the ended field is still in the hash")
	}

	s.Restart() // the hash is gone
	if got, ok := b.Penalties().Find("r", subj, time.Now()); !ok || !got.Until.Equal(now.Add(time.Hour)) {
		t.Fatalf("after a restart: %+v %v, want the same end", got, ok)
	}
	if _, ok := b.Penalties().Find("r", subj, now.Add(time.Hour)); ok {
		t.Fatal("the penalty outlives its end after a restart")
	}
}

// A penalty imposed on an instance whose book has no room for it is
// shared all the same: it is in the hash, and another instance holds it.
func TestRedisPenaltyIsSharedWhenTheBookHasNoRoom(t *testing.T) {
	s := redistest.Start(t)
	opts := limiter.RedisOptions{Addrs: []string{s.Addr}}
	a, b := redistest.NewLimiter(t, opts), redistest.NewLimiter(t, opts)
	ctx := context.Background()
	now := time.Now()
	for i := range limiter.MaxPenalties {
		a.HoldPenalty(limiter.Penalty{Route: "r", Policy: "p", Pseudonym: "v1:filler-" + strconv.Itoa(i), Start: now, Until: now.Add(limiter.MaxPenalty)})
	}
	subj := limitertest.Subject()
	if err := a.Penalties().Impose(ctx, limiter.Penalty{Route: "r", Policy: "p", Pseudonym: subj, Start: now, Until: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Penalties().Find("r", subj, time.Now()); ok {
		t.Fatal("held by a book whose route's penalties all end later")
	}
	if !s.Client(t).HExists(ctx, "rl:penalties", "r\x00"+subj).Val() {
		t.Fatal("the penalty is not in the hash")
	}
	if !eventually(time.Second, func() bool { _, ok := b.Penalties().Find("r", subj, time.Now()); return ok }) {
		t.Fatal("another instance did not hear of the penalty")
	}
}

func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}
