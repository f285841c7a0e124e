package limiter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Penalties on Redis. Each instance keeps the penalties in force in its
// own memory (a penaltyBook), and the request path asks only that: a
// penalty costs no Redis call per request. The instance whose policy
// refused records the penalty in its book at once, and tells the others
// over the resets subscription (redis_resets.go), on a channel of its own
// beside the resets one, <prefix>penalties: each message is a penalty as
// JSON (pseudonym, route, policy, start, end) or a lift, with the name of
// the instance that published it, which skips its own. A publish reaches
// every subscriber within milliseconds, Cluster included, which the
// script's keys could match only with a read per request.
//
// A subscriber misses what is published while it is not subscribed (it
// is starting, or its connection broke). So each penalty is also a field
// of one hash, <prefix>{penalties}, and every (re)subscription reads the
// hash back into the book with HSCAN, a step at a time, again each second
// until a read succeeds. Beside the hash a sorted set,
// <prefix>{penalties}:ends, scores each field by its penalty's end; one
// hash tag puts both on one Cluster slot, and lua/penalties.lua writes,
// lifts and sweeps them together. The sweep each instance runs every
// second (keepPenalties runs it and the loads) reads the sorted set up to
// now and, when a penalty has ended, the script deletes the fields whose
// end has come, read and deleted at once: the sweep reads nothing in
// force, and a field written again with a later end is not among those it
// deletes. So the hash holds the penalties in force and those that ended
// within a second.
// A penalty's end is a time, not a length: a Redis restart or failover
// that loses the hash, or a late read of it, never makes one last longer.

func (r *Redis) penaltiesChannel() string { return r.prefix + "penalties" }

// penaltiesKeys are the hash of penalties and the sorted set of their
// ends, under one hash tag (lua/penalties.lua).
func (r *Redis) penaltiesKeys() []string {
	return []string{r.prefix + "{penalties}", r.prefix + "{penalties}:ends"}
}

// penaltyRecord is a Penalty as the hash and the channel carry it.
type penaltyRecord struct {
	Route     string    `json:"route"`
	Policy    string    `json:"policy,omitempty"`
	Pseudonym string    `json:"pseudonym"`
	Start     time.Time `json:"start"`
	Until     time.Time `json:"until"`
	Lifted    bool      `json:"lifted,omitempty"`
	// From is the instance that published it (Redis.instance).
	From string `json:"from,omitempty"`
}

func (rec penaltyRecord) penalty() Penalty {
	return Penalty{Route: rec.Route, Policy: rec.Policy, Pseudonym: rec.Pseudonym, Start: rec.Start, Until: rec.Until}
}

func penaltyField(route, pseudonym string) string { return route + "\x00" + pseudonym }

// redisPenalties are a Redis backend's penalties.
type redisPenalties struct{ r *Redis }

// Penalties are the backend's penalties.
func (r *Redis) Penalties() Penalties { return redisPenalties{r} }

func (p redisPenalties) Impose(ctx context.Context, pen Penalty) error {
	r := p.r
	if r.penalties.put(pen, pen.Start) {
		return nil
	}
	// Recorded, or not for want of room here: the others have their own.
	rec, err := json.Marshal(penaltyRecord{Route: pen.Route, Policy: pen.Policy, Pseudonym: pen.Pseudonym,
		Start: pen.Start.UTC(), Until: pen.Until.UTC(), From: r.instance})
	if err != nil {
		return err
	}
	field := penaltyField(pen.Route, pen.Pseudonym)
	if _, err := r.evalsha(ctx, r.penaltyScript.call(r.penaltiesKeys(), []any{"impose", field, rec, pen.Until.UnixMilli()})); err != nil {
		return penaltyFailed("record it", err)
	}
	if err := r.client.Publish(ctx, r.penaltiesChannel(), rec).Err(); err != nil {
		return penaltyFailed("tell the other instances", err)
	}
	return nil
}

func (p redisPenalties) Find(route, pseudonym string, now time.Time) (Penalty, bool) {
	return p.r.penalties.find(route, pseudonym, now)
}

func (p redisPenalties) List(route string, now time.Time) []Penalty {
	return p.r.penalties.list(route, now)
}

// Lift is true when this instance's book or the hash held the penalty in
// force: the book may have had no room for it, or not heard of it.
func (p redisPenalties) Lift(ctx context.Context, route, pseudonym string) (bool, error) {
	r := p.r
	now := time.Now()
	found := r.penalties.lift(route, pseudonym, now)
	reply, err := r.evalsha(ctx, r.penaltyScript.call(r.penaltiesKeys(), []any{"lift", penaltyField(route, pseudonym), now.UnixMilli()}))
	if err != nil {
		return found, penaltyFailed("take it off the list", err)
	}
	if len(reply) == 1 && reply[0] == int64(1) {
		found = true
	}
	rec, _ := json.Marshal(penaltyRecord{Route: route, Pseudonym: pseudonym, Lifted: true, From: r.instance})
	if err := r.client.Publish(ctx, r.penaltiesChannel(), rec).Err(); err != nil {
		return found, penaltyFailed("tell the other instances", err)
	}
	return found, nil
}

// penaltyError is a failed Impose or Lift, named by its error's class
// (classifyRedisError), never by its text: a NOPERM reply of Redis 7.2
// names the ACL user, and callers log the error. It is the context's
// error (errors.Is) when that was the cause.
type penaltyError struct {
	doing, cause string
	ctxErr       error
}

func penaltyFailed(doing string, err error) error {
	cause, _ := classifyRedisError(err)
	e := &penaltyError{doing: doing, cause: cause}
	for _, c := range []error{context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, c) {
			e.ctxErr = c
		}
	}
	return e
}

func (e *penaltyError) Error() string { return "penalty: " + e.doing + ": " + e.cause }
func (e *penaltyError) Unwrap() error { return e.ctxErr }

// penaltyMessage applies a message of the penalties channel to the book,
// unless this instance published it: Impose and Lift applied it here
// already (and counted a penalty the book had no room for).
func (r *Redis) penaltyMessage(payload string) {
	var rec penaltyRecord
	if json.Unmarshal([]byte(payload), &rec) != nil || rec.From == r.instance {
		return
	}
	now := time.Now()
	if rec.Lifted {
		r.penalties.lift(rec.Route, rec.Pseudonym, now)
		return
	}
	r.penalties.put(rec.penalty(), now)
}

// A load's step is one HSCAN of penaltyScanCount fields; a sweep's, one
// call of the script that deletes at most penaltySweepCount fields. Each
// step is bounded by penaltyStepTimeout. The sweep runs every
// penaltySweepInterval.
const (
	penaltyScanCount     = 1000
	penaltySweepCount    = 1000
	penaltyStepTimeout   = 2 * time.Second
	penaltySweepInterval = time.Second
)

// loadPenalties reads the hash into the book, the penalties in force at
// the time of each step. A step that fails ends it, with the step's
// error.
func (r *Redis) loadPenalties(ctx context.Context) error {
	var cursor uint64
	for {
		step, cancel := context.WithTimeout(ctx, penaltyStepTimeout)
		kv, next, err := r.client.HScan(step, r.penaltiesKeys()[0], cursor, "", penaltyScanCount).Result()
		cancel()
		if err != nil {
			return fmt.Errorf("penalties: read the list: %w", err)
		}
		now := time.Now()
		for i := 0; i+1 < len(kv); i += 2 {
			var rec penaltyRecord
			if json.Unmarshal([]byte(kv[i+1]), &rec) == nil && rec.Until.After(now) {
				r.penalties.put(rec.penalty(), now)
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// keepPenalties keeps the book and the hash for s until ctx is done, then
// closes s.kept: it reads the hash into the book after every
// (re)subscription, and again every penaltySweepInterval until a read
// succeeds; the first that does closes s.loaded. It sweeps the hash every
// penaltySweepInterval. A failure is logged (penaltyStepLog).
func (r *Redis) keepPenalties(ctx context.Context, s *resetSubscription) {
	defer close(s.kept)
	t := time.NewTicker(penaltySweepInterval)
	defer t.Stop()
	loads := penaltyStepLog{step: "load"}
	sweeps := penaltyStepLog{step: "sweep"}
	toLoad, loaded := false, false
	for {
		if toLoad {
			err := r.loadPenalties(ctx)
			if ctx.Err() != nil {
				return
			}
			loads.note(r.logger, err, time.Now())
			if err == nil {
				toLoad = false
				if !loaded {
					loaded = true
					close(s.loaded)
				}
			}
		}
		select {
		case <-s.subscribed:
			toLoad = true
		case <-t.C:
			err := r.sweepPenalties(ctx)
			if ctx.Err() != nil {
				return
			}
			sweeps.note(r.logger, err, time.Now())
		case <-ctx.Done():
			return
		}
	}
}

// sweepPenalties deletes the fields of the penalties that ended, in
// steps of penaltySweepCount until one finds fewer. It runs the script
// only when one has ended: a sweep with none to delete is one
// ZRANGEBYSCORE of one element.
func (r *Redis) sweepPenalties(ctx context.Context) error {
	keys := r.penaltiesKeys()
	step, cancel := context.WithTimeout(ctx, penaltyStepTimeout)
	due, err := r.client.ZRangeByScore(step, keys[1], &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatInt(time.Now().UnixMilli(), 10), Count: 1}).Result()
	cancel()
	if err != nil {
		return fmt.Errorf("penalties: find the ended: %w", err)
	}
	if len(due) == 0 {
		return nil
	}
	for {
		step, cancel := context.WithTimeout(ctx, penaltyStepTimeout)
		reply, err := r.evalsha(step, r.penaltyScript.call(keys, []any{"sweep", time.Now().UnixMilli(), penaltySweepCount}))
		cancel()
		if err != nil {
			return fmt.Errorf("penalties: drop the ended: %w", err)
		}
		if len(reply) != 1 {
			return errMalformedReply
		}
		if n, ok := reply[0].(int64); !ok || n < penaltySweepCount {
			return nil
		}
	}
}

// penaltyStepLogGap is the least time between two lines of a step that
// keeps failing for one cause.
const penaltyStepLogGap = time.Minute

// penaltyStepLog logs the failures of one background step of the
// penalties (their load or sweep), which runs every second while it
// fails: a line when it starts failing or fails for another cause, then
// one a penaltyStepLogGap while it goes on, with the failures since the
// last line; and a line when it works again. A line names the error's
// class (classifyRedisError: noperm, timeout, ...), not its text.
// A refusal by the ACL (noperm) is one line at Info while it lasts: the
// base ACL of docs/redis.md has no penalties' commands, and is enough
// where no route has a penalty.
type penaltyStepLog struct {
	step string
	// cause is the last failure's class; "" when the last try worked.
	cause  string
	logged time.Time
	// failures are those since the last line.
	failures int
}

// note logs, when due, the outcome of one try of the step at now.
func (l *penaltyStepLog) note(logger *slog.Logger, err error, now time.Time) {
	if err == nil {
		if l.cause != "" {
			logger.Info("redis penalties: a step works again", "step", l.step)
			l.cause, l.failures = "", 0
		}
		return
	}
	cause, _ := classifyRedisError(err)
	l.failures++
	if cause == l.cause && (cause == "noperm" || now.Sub(l.logged) < penaltyStepLogGap) {
		return
	}
	if cause == "noperm" {
		logger.Info("redis penalties: not loaded or swept: the Redis user may not run their commands", "step", l.step, "cause", cause)
	} else {
		logger.Warn("redis penalties: a step fails", "step", l.step, "cause", cause, "failures", l.failures)
	}
	l.cause, l.logged, l.failures = cause, now, 0
}
