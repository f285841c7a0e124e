package limiter_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
	"github.com/edgegate/gateway/lua"
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
	admin := s.Client(t)
	writePenalties(t, admin, limiter.Penalty{Route: "r", Policy: "p", Pseudonym: ended, Start: now.Add(-time.Hour), Until: now.Add(-time.Minute)})
	b := redistest.NewLimiter(t, opts)
	if !eventually(time.Second, func() bool { _, ok := b.Penalties().Find("r", subj, time.Now()); return ok }) {
		t.Fatal("an instance started after the penalty does not find it")
	}
	if _, ok := b.Penalties().Find("r", ended, time.Now()); ok {
		t.Fatal("an ended penalty was loaded")
	}
	if !eventually(2*time.Second, func() bool { return !admin.HExists(ctx, "rl:{penalties}", "r\x00"+ended).Val() }) {
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
	if !s.Client(t).HExists(ctx, "rl:{penalties}", "r\x00"+subj).Val() {
		t.Fatal("the penalty is not in the hash")
	}
	if !eventually(time.Second, func() bool { _, ok := b.Penalties().Find("r", subj, time.Now()); return ok }) {
		t.Fatal("another instance did not hear of the penalty")
	}
}

// A penalty the imposing instance's book has no room for is one refusal
// there, not two: the instance does not apply its own publish again.
func TestRedisPenaltyRefusedForWantOfRoomIsCountedOnce(t *testing.T) {
	s := redistest.Start(t)
	reg := prometheus.NewRegistry()
	a := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}, Registerer: reg})
	b := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
	ctx := context.Background()
	now := time.Now()
	for i := range limiter.MaxPenalties {
		a.HoldPenalty(limiter.Penalty{Route: "r", Policy: "p", Pseudonym: "v1:filler-" + strconv.Itoa(i), Start: now, Until: now.Add(limiter.MaxPenalty)})
	}
	if err := a.Penalties().Impose(ctx, limiter.Penalty{Route: "r", Policy: "p", Pseudonym: limitertest.Subject(), Start: now, Until: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	// b's publish reaches a after a's own: once a holds b's penalty, a
	// has handled its own message too.
	other := limiter.Penalty{Route: "s", Policy: "p", Pseudonym: limitertest.Subject(), Start: now, Until: now.Add(time.Minute)}
	if err := b.Penalties().Impose(ctx, other); err != nil {
		t.Fatal(err)
	}
	if !eventually(time.Second, func() bool { _, ok := a.Penalties().Find("s", other.Pseudonym, time.Now()); return ok }) {
		t.Fatal("a did not hear of b's penalty")
	}
	if n := labeled(t, reg, "gateway_limiter_penalty_evictions_total", "result", "refused"); n != 1 {
		t.Fatalf("gateway_limiter_penalty_evictions_total{result=\"refused\"} says %v, want 1", n)
	}
}

// The hash of penalties holds none that ended: every instance drops the
// ended fields within seconds, with no resubscription, however many
// subjects (a client may pick its own) were penalized.
func TestRedisPenaltyHashDropsEndedPenalties(t *testing.T) {
	s := redistest.Start(t)
	a := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
	ctx := context.Background()
	now := time.Now()
	for range 200 {
		p := limiter.Penalty{Route: "r", Policy: "p", Pseudonym: limitertest.Subject(), Start: now, Until: now.Add(100 * time.Millisecond)}
		if err := a.Penalties().Impose(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	admin := s.Client(t)
	if !eventually(3*time.Second, func() bool { return admin.HLen(ctx, "rl:{penalties}").Val() == 0 }) {
		t.Fatalf("rl:{penalties} still holds %d fields of penalties that all ended", admin.HLen(ctx, "rl:{penalties}").Val())
	}
	if n := admin.ZCard(ctx, "rl:{penalties}:ends").Val(); n != 0 {
		t.Fatalf("rl:{penalties}:ends still holds %d ends", n)
	}
}

// The sweep reads only what ended: it runs no HSCAN and leaves every
// penalty in force; a penalty imposed again with a later end after the
// first ended stays, with its new end.
func TestRedisPenaltySweepReadsOnlyWhatEnded(t *testing.T) {
	s := redistest.Start(t)
	a := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
	admin := s.Client(t)
	ctx := context.Background()
	now := time.Now()
	const n = 2000
	for i := range n {
		p := limiter.Penalty{Route: "r", Policy: "p", Pseudonym: "v1:s-" + strconv.Itoa(i), Start: now, Until: now.Add(time.Hour)}
		if err := a.Penalties().Impose(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	again := limiter.Penalty{Route: "r", Policy: "p", Pseudonym: limitertest.Subject(), Start: now, Until: now.Add(50 * time.Millisecond)}
	if err := a.Penalties().Impose(ctx, again); err != nil {
		t.Fatal(err)
	}
	scans := commandCalls(t, admin, "hscan")
	time.Sleep(100 * time.Millisecond)
	again.Start, again.Until = time.Now(), time.Now().Add(time.Hour)
	if err := a.Penalties().Impose(ctx, again); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2200 * time.Millisecond) // two sweeps at least
	if got := commandCalls(t, admin, "hscan"); got != scans {
		t.Fatalf("%d HSCAN calls in two sweeps, want none", got-scans)
	}
	if got := admin.HLen(ctx, "rl:{penalties}").Val(); got != n+1 {
		t.Fatalf("the hash holds %d fields, want the %d in force", got, n+1)
	}
	if end := admin.ZScore(ctx, "rl:{penalties}:ends", "r\x00"+again.Pseudonym).Val(); end != float64(again.Until.UnixMilli()) {
		t.Fatalf("the penalty imposed again ends at %v in Redis, want %v", end, again.Until.UnixMilli())
	}
}

// An instance that starts loads every penalty in force from a hash too
// large for one read, and drops the ended fields.
func TestRedisPenaltiesLoadFromALargeHash(t *testing.T) {
	s := redistest.Start(t)
	admin := s.Client(t)
	ctx := context.Background()
	now := time.Now()
	const n = 5000
	pens := make([]limiter.Penalty, n)
	for i := range pens {
		until := now.Add(time.Hour)
		if i%2 == 1 {
			until = now.Add(-time.Minute)
		}
		pens[i] = limiter.Penalty{Route: "r", Policy: "p", Pseudonym: "v1:s-" + strconv.Itoa(i), Start: now, Until: until}
	}
	writePenalties(t, admin, pens...)
	b := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
	if !eventually(2*time.Second, func() bool { return len(b.Penalties().List("r", time.Now())) == n/2 }) {
		t.Fatalf("%d penalties loaded, want %d", len(b.Penalties().List("r", time.Now())), n/2)
	}
	if !eventually(2*time.Second, func() bool { return admin.HLen(ctx, "rl:{penalties}").Val() == n/2 }) {
		t.Fatalf("the hash holds %d fields, want the %d in force", admin.HLen(ctx, "rl:{penalties}").Val(), n/2)
	}
}

// An instance whose ACL user may not read the hash says so once, at
// Info, by the error's class, and is not Subscribed; once the user may,
// the next try reads the hash.
func TestRedisPenaltiesLoadFailureIsLoggedAndRetried(t *testing.T) {
	s := redistest.Start(t)
	admin := s.Client(t)
	ctx := context.Background()
	subj := limitertest.Subject()
	now := time.Now()
	writePenalties(t, admin, limiter.Penalty{Route: "r", Policy: "p", Pseudonym: subj, Start: now, Until: now.Add(time.Hour)})
	const user = "no-hscan"
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", ">test-only-fake-password", "~rl:*", "resetchannels", "&rl:resets", "&rl:penalties",
		"-@all", "+evalsha", "+script|load", "+ping", "+hello", "+time", "+hmget", "+hset", "+pexpire", "+get", "+set",
		"+rpush", "+lpop", "+del", "+hdel", "+zadd", "+zscore", "+zrem", "+publish", "+subscribe").Err(); err != nil {
		t.Fatal(err)
	}
	var log logLines
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}, Username: user, Password: "test-only-fake-password",
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	time.Sleep(time.Second) // a try a second, three at least by now
	select {
	case <-r.Subscribed():
		t.Fatal("Subscribed though the hash could not be read")
	default:
	}
	for _, step := range []string{"load", "sweep"} {
		if n := log.count("level=INFO", "not loaded or swept", "step="+step, "cause=noperm"); n != 1 {
			t.Fatalf("%d lines of the refused %s with its cause, want 1:\n%s", n, step, log.String())
		}
	}
	if n := log.count("level=WARN"); n != 0 {
		t.Fatalf("%d warnings of a refusal by the ACL, want none:\n%s", n, log.String())
	}
	if strings.Contains(log.String(), user) || strings.Contains(log.String(), "NOPERM") {
		t.Fatalf("the log carries the error's text:\n%s", log.String())
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "+hscan", "+zrangebyscore").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Subscribed():
	case <-time.After(3 * time.Second):
		t.Fatal("not Subscribed once the hash can be read")
	}
	if _, ok := r.Penalties().Find("r", subj, time.Now()); !ok {
		t.Fatal("the penalty in the hash was not loaded")
	}
	if !eventually(2*time.Second, func() bool { return log.count("a step works again", "step=sweep") == 1 }) || log.count("a step works again", "step=load") != 1 {
		t.Fatalf("no line says the steps work again:\n%s", log.String())
	}
}

// Close stops a load of a large hash at its current step: it does not
// wait for the whole hash to be read.
func TestRedisPenaltiesCloseStopsALoad(t *testing.T) {
	s := redistest.Start(t)
	admin := s.Client(t)
	ctx := context.Background()
	now := time.Now()
	const n = 100_000
	const steps = n / 1000 // a step reads about 1,000 fields
	for at := 0; at < n; at += 10_000 {
		pens := make([]limiter.Penalty, 10_000)
		for i := range pens {
			pens[i] = limiter.Penalty{Route: "r", Policy: "p", Pseudonym: "v1:s-" + strconv.Itoa(at+i), Start: now, Until: now.Add(time.Hour)}
		}
		writePenalties(t, admin, pens...)
	}
	r, err := limiter.NewRedis(ctx, limiter.RedisOptions{Addrs: []string{s.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	scans := func() int { return commandCalls(t, admin, "hscan") }
	if !eventually(2*time.Second, func() bool { return scans() > 0 }) {
		r.Close()
		t.Fatal("the load did not start")
	}
	r.Close()
	if got := scans(); got >= steps/2 {
		t.Fatalf("the load ran %d steps of about %d before Close returned, want a few", got, steps)
	}
}

// A lift is found when the hash held the penalty in force, though this
// instance's book did not: it had no room for it, or never heard of it.
func TestRedisPenaltyLiftFindsWhatTheHashHeld(t *testing.T) {
	s := redistest.Start(t)
	admin := s.Client(t)
	a := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
	ctx := context.Background()
	now := time.Now()
	for i := range limiter.MaxPenalties {
		a.HoldPenalty(limiter.Penalty{Route: "r", Policy: "p", Pseudonym: "v1:filler-" + strconv.Itoa(i), Start: now, Until: now.Add(limiter.MaxPenalty)})
	}
	for _, c := range []struct {
		name  string
		until time.Time
		write func(limiter.Penalty)
		found bool
	}{
		{"a penalty the book had no room for is found", now.Add(time.Minute), func(p limiter.Penalty) {
			if err := a.Penalties().Impose(ctx, p); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"a penalty the book never heard of is found", now.Add(time.Minute), func(p limiter.Penalty) { writePenalties(t, admin, p) }, true},
		{"a penalty past its end is not found", now.Add(-time.Second), func(p limiter.Penalty) { writePenalties(t, admin, p) }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := limiter.Penalty{Route: "r", Policy: "p", Pseudonym: limitertest.Subject(), Start: now.Add(-time.Minute), Until: c.until}
			c.write(p)
			if _, ok := a.Penalties().Find("r", p.Pseudonym, time.Now()); ok {
				t.Fatal("the book holds it")
			}
			found, err := a.Penalties().Lift(ctx, "r", p.Pseudonym)
			if err != nil || found != c.found {
				t.Fatalf("lift: %v %v, want %v", found, err, c.found)
			}
			if admin.HExists(ctx, "rl:{penalties}", "r\x00"+p.Pseudonym).Val() {
				t.Fatal("the field is still in the hash")
			}
		})
	}
}

// A script that a refusal by the ACL ends part way leaves no field of
// the hash without its end in the sorted set, so the sweep drops whatever
// it wrote.
func TestRedisPenaltyScriptEndedPartWayLeavesNothingUnswept(t *testing.T) {
	for _, c := range []struct {
		without string
		ends    int64 // written before the refusal
	}{{"zadd", 0}, {"hset", 1}} {
		t.Run("a user without "+c.without+" writes no field without its end", func(t *testing.T) {
			s := redistest.Start(t)
			admin := s.Client(t)
			ctx := context.Background()
			user := "no-" + c.without
			setPenaltiesUser(t, admin, user)
			r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}, Username: user, Password: "test-only-fake-password"})
			// The gateway's own script needs HSET: the command is taken
			// away once the instance is up, and another sweeps.
			if err := admin.Do(ctx, "ACL", "SETUSER", user, "-"+c.without).Err(); err != nil {
				t.Fatal(err)
			}
			redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}})
			now := time.Now()
			p := limiter.Penalty{Route: "r", Policy: "p", Pseudonym: limitertest.Subject(), Start: now, Until: now.Add(500 * time.Millisecond)}
			if err := r.Penalties().Impose(ctx, p); err == nil {
				t.Fatal("recorded without " + c.without)
			}
			if n := admin.ZCard(ctx, "rl:{penalties}:ends").Val(); n != c.ends {
				t.Fatalf("%d ends written before the refusal, want %d", n, c.ends)
			}
			for _, field := range admin.HKeys(ctx, "rl:{penalties}").Val() {
				if err := admin.ZScore(ctx, "rl:{penalties}:ends", field).Err(); err != nil {
					t.Fatalf("the field %q has no end in the sorted set: %v", field, err)
				}
			}
			if !eventually(3*time.Second, func() bool {
				return admin.HLen(ctx, "rl:{penalties}").Val() == 0 && admin.ZCard(ctx, "rl:{penalties}:ends").Val() == 0
			}) {
				t.Fatalf("%d fields and %d ends left unswept", admin.HLen(ctx, "rl:{penalties}").Val(), admin.ZCard(ctx, "rl:{penalties}:ends").Val())
			}
		})
	}
}

// The penalties script refuses an op it does not know: it sweeps nothing.
func TestRedisPenaltiesScriptRefusesAnUnknownOp(t *testing.T) {
	s := redistest.Start(t)
	admin := s.Client(t)
	ctx := context.Background()
	now := time.Now()
	writePenalties(t, admin, limiter.Penalty{Route: "r", Policy: "p", Pseudonym: limitertest.Subject(), Start: now.Add(-time.Hour), Until: now.Add(-time.Minute)})
	sha, err := admin.ScriptLoad(ctx, lua.Penalties).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.EvalSha(ctx, sha, []string{"rl:{penalties}", "rl:{penalties}:ends"}, "sweeep", now.UnixMilli(), 1000).Err(); err == nil {
		t.Fatal("an unknown op ran")
	}
	if n := admin.HLen(ctx, "rl:{penalties}").Val(); n != 1 {
		t.Fatalf("the hash holds %d fields, want the 1 written", n)
	}
}

// The errors of Impose and Lift name the Redis error's class, never its
// text, which may name the ACL user; one that a context ended is still
// that context's error.
func TestRedisPenaltyErrorsNameTheClassAlone(t *testing.T) {
	s := redistest.Start(t)
	admin := s.Client(t)
	const user = "alice-user"
	setPenaltiesUser(t, admin, user, "+publish")
	var log logLines
	r := redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}, Username: user, Password: "test-only-fake-password",
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	ctx := context.Background()
	now := time.Now()
	p := limiter.Penalty{Route: "r", Policy: "p", Pseudonym: limitertest.Subject(), Start: now, Until: now.Add(time.Minute)}
	imposed := r.Penalties().Impose(ctx, p)
	_, lifted := r.Penalties().Lift(ctx, "r", p.Pseudonym)
	for name, err := range map[string]error{"impose": imposed, "lift": lifted} {
		if err == nil || !strings.Contains(err.Error(), "noperm") {
			t.Fatalf("%s: %v, want an error of class noperm", name, err)
		}
		for _, text := range []string{user, "NOPERM", "permissions"} {
			if strings.Contains(err.Error(), text) {
				t.Fatalf("%s: %q carries the reply's text", name, err)
			}
		}
	}
	if strings.Contains(log.String(), user) {
		t.Fatalf("the log names the user:\n%s", log.String())
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	p.Pseudonym = limitertest.Subject()
	if err := r.Penalties().Impose(canceled, p); !errors.Is(err, context.Canceled) {
		t.Fatalf("impose on a canceled context: %v, want context.Canceled", err)
	}
}

// A penalties step refused by the ACL says so once, at Info, for as long
// as it lasts; another cause warns once a minute; a step that works
// again says so.
func TestPenaltyStepLogSaysARefusalByTheACLOnce(t *testing.T) {
	noperm := reply("NOPERM User alice-user has no permissions to run the 'zrangebyscore' command")
	start := time.Now()
	for _, c := range []struct {
		name        string
		errs        func(second int) error
		infos, warn int
	}{
		{"a refusal by the ACL for an hour is one line at Info", func(int) error { return noperm }, 1, 0},
		{"a timeout for an hour warns once a minute", func(int) error { return context.DeadlineExceeded }, 0, 60},
		{"a refusal after a timeout is one warning and one line at Info", func(s int) error {
			if s < 30 {
				return context.DeadlineExceeded
			}
			return noperm
		}, 1, 1},
		{"a refusal that ends says so", func(s int) error {
			if s < 30 {
				return noperm
			}
			return nil
		}, 2, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var log logLines
			logger := slog.New(slog.NewTextHandler(&log, nil))
			l := limiter.NewPenaltyStepLog("sweep")
			for second := range 3600 {
				l.Note(logger, c.errs(second), start.Add(time.Duration(second)*time.Second))
			}
			if infos, warns := log.count("level=INFO"), log.count("level=WARN"); infos != c.infos || warns != c.warn {
				t.Fatalf("%d lines at Info and %d warnings, want %d and %d:\n%s", infos, warns, c.infos, c.warn, log.String())
			}
			if strings.Contains(log.String(), "alice-user") {
				t.Fatalf("the log names the user:\n%s", log.String())
			}
		})
	}
}

// setPenaltiesUser sets user up on admin's Redis with the commands the
// gateway and its penalties run, but those of without.
func setPenaltiesUser(t *testing.T, admin *redis.Client, user string, without ...string) {
	t.Helper()
	args := []any{"ACL", "SETUSER", user, "reset", "on", ">test-only-fake-password", "~rl:*", "resetchannels", "&rl:resets", "&rl:penalties", "-@all"}
	for _, c := range []string{"+evalsha", "+script|load", "+ping", "+hello", "+time", "+info", "+hmget", "+hset", "+pexpire", "+get", "+set",
		"+rpush", "+lpop", "+del", "+hdel", "+hscan", "+zadd", "+zscore", "+zrem", "+zrangebyscore", "+publish", "+subscribe"} {
		if !slices.Contains(without, c) {
			args = append(args, c)
		}
	}
	if err := admin.Do(context.Background(), args...).Err(); err != nil {
		t.Fatal(err)
	}
}

// writePenalties writes pens to Redis as Impose does: each a field of the
// hash, and its end in the sorted set beside it.
func writePenalties(t *testing.T, c *redis.Client, pens ...limiter.Penalty) {
	t.Helper()
	fields := make([]any, 0, 2*len(pens))
	ends := make([]redis.Z, 0, len(pens))
	for _, p := range pens {
		rec, _ := json.Marshal(map[string]any{"route": p.Route, "policy": p.Policy, "pseudonym": p.Pseudonym, "start": p.Start, "until": p.Until})
		field := p.Route + "\x00" + p.Pseudonym
		fields = append(fields, field, rec)
		ends = append(ends, redis.Z{Score: float64(p.Until.UnixMilli()), Member: field})
	}
	ctx := context.Background()
	if err := c.HSet(ctx, "rl:{penalties}", fields...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ZAdd(ctx, "rl:{penalties}:ends", ends...).Err(); err != nil {
		t.Fatal(err)
	}
}

// commandCalls is how many times the server ran command (INFO
// commandstats).
func commandCalls(t *testing.T, c *redis.Client, command string) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+command+":calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

// logLines is a log's text, written by any goroutine.
type logLines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// count is the number of lines that hold every one of parts.
func (l *logLines) count(parts ...string) int {
	n := 0
lines:
	for line := range strings.Lines(l.String()) {
		for _, p := range parts {
			if !strings.Contains(line, p) {
				continue lines
			}
		}
		n++
	}
	return n
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
