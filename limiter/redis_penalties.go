package limiter

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"
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
// of one hash, <prefix>penalties, and every (re)subscription reads the
// hash back into the book, again each second until a read succeeds. The
// hash is read with HSCAN, a step at a time, and every read drops the
// fields past their end: the loads, and the sweep each instance runs
// (keepPenalties runs both). So the hash holds the
// penalties in force and those that ended within one pass of the sweep,
// however many subjects were ever penalized. A field written again
// between a read that found it ended and its deletion is lost from the
// hash, not from the instances that heard it published.
// A penalty's end is a time, not a length: a Redis restart or failover
// that loses the hash, or a late read of it, never makes one last longer.

func (r *Redis) penaltiesChannel() string { return r.prefix + "penalties" }
func (r *Redis) penaltiesKey() string     { return r.prefix + "penalties" }

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
	if r.penalties.put(pen, pen.Start) == penaltyStands {
		return nil
	}
	// Recorded, or not for want of room here: the others have their own.
	rec, err := json.Marshal(penaltyRecord{Route: pen.Route, Policy: pen.Policy, Pseudonym: pen.Pseudonym,
		Start: pen.Start.UTC(), Until: pen.Until.UTC(), From: r.instance})
	if err != nil {
		return err
	}
	if err := r.client.HSet(ctx, r.penaltiesKey(), penaltyField(pen.Route, pen.Pseudonym), rec).Err(); err != nil {
		return fmt.Errorf("penalty: record it: %w", err)
	}
	if err := r.client.Publish(ctx, r.penaltiesChannel(), rec).Err(); err != nil {
		return fmt.Errorf("penalty: tell the other instances: %w", err)
	}
	return nil
}

func (p redisPenalties) Find(route, pseudonym string, now time.Time) (Penalty, bool) {
	return p.r.penalties.find(route, pseudonym, now)
}

func (p redisPenalties) List(route string, now time.Time) []Penalty {
	return p.r.penalties.list(route, now)
}

func (p redisPenalties) Lift(ctx context.Context, route, pseudonym string) (bool, error) {
	r := p.r
	found := r.penalties.lift(route, pseudonym, time.Now())
	if err := r.client.HDel(ctx, r.penaltiesKey(), penaltyField(route, pseudonym)).Err(); err != nil {
		return found, fmt.Errorf("penalty: take it off the list: %w", err)
	}
	rec, _ := json.Marshal(penaltyRecord{Route: route, Pseudonym: pseudonym, Lifted: true, From: r.instance})
	if err := r.client.Publish(ctx, r.penaltiesChannel(), rec).Err(); err != nil {
		return found, fmt.Errorf("penalty: tell the other instances: %w", err)
	}
	return found, nil
}

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

// Reading the hash: a step is one HSCAN of penaltyScanCount fields, within
// penaltyStepTimeout; the sweep reads at least penaltyScanCount fields
// every penaltySweepInterval, more when the hash is large, so that a pass
// takes no longer than penaltySweepPass.
const (
	penaltyScanCount     = 1000
	penaltyStepTimeout   = 2 * time.Second
	penaltySweepInterval = time.Second
	penaltySweepPass     = time.Minute
)

// scanPenalties reads one step of the hash from cursor, hands each
// penalty in force at now to keep (nil: none), and deletes the fields
// that ended or cannot be read. It returns the next cursor (0: the pass
// is done) and how many fields it read.
func (r *Redis) scanPenalties(ctx context.Context, cursor uint64, now time.Time, keep func(Penalty)) (uint64, int, error) {
	kv, next, err := r.client.HScan(ctx, r.penaltiesKey(), cursor, "", penaltyScanCount).Result()
	if err != nil {
		return cursor, 0, fmt.Errorf("penalties: read the list: %w", err)
	}
	var ended []string
	for i := 0; i+1 < len(kv); i += 2 {
		var rec penaltyRecord
		if json.Unmarshal([]byte(kv[i+1]), &rec) != nil || !rec.Until.After(now) {
			ended = append(ended, kv[i])
			continue
		}
		if keep != nil {
			keep(rec.penalty())
		}
	}
	if len(ended) > 0 {
		if err := r.client.HDel(ctx, r.penaltiesKey(), ended...).Err(); err != nil {
			return next, len(kv) / 2, fmt.Errorf("penalties: drop the ended: %w", err)
		}
	}
	return next, len(kv) / 2, nil
}

// loadPenalties reads the hash into the book, and drops the fields that
// have ended. A step that fails ends it, with the step's error.
func (r *Redis) loadPenalties(ctx context.Context) error {
	var cursor uint64
	for {
		step, cancel := context.WithTimeout(ctx, penaltyStepTimeout)
		now := time.Now()
		next, _, err := r.scanPenalties(step, cursor, now, func(p Penalty) { r.penalties.put(p, now) })
		cancel()
		if err != nil || next == 0 {
			return err
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
	var cursor uint64
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
			var err error
			cursor, err = r.sweepPenaltiesOnce(ctx, cursor)
			if ctx.Err() != nil {
				return
			}
			sweeps.note(r.logger, err, time.Now())
		case <-ctx.Done():
			return
		}
	}
}

// sweepPenaltiesOnce reads the hash from cursor, dropping the ended
// fields, for one interval's share of a pass (at least penaltyScanCount
// fields), and returns where to go on; it stops early at a pass's end or
// a failed step.
func (r *Redis) sweepPenaltiesOnce(ctx context.Context, cursor uint64) (uint64, error) {
	step, cancel := context.WithTimeout(ctx, penaltyStepTimeout)
	size, err := r.client.HLen(step, r.penaltiesKey()).Result()
	cancel()
	if err != nil {
		return cursor, fmt.Errorf("penalties: size the list: %w", err)
	}
	if size == 0 {
		return cursor, nil
	}
	share := max(int(size/int64(penaltySweepPass/penaltySweepInterval)), penaltyScanCount)
	for read := 0; read < share; {
		step, cancel := context.WithTimeout(ctx, penaltyStepTimeout)
		next, n, err := r.scanPenalties(step, cursor, time.Now(), nil)
		cancel()
		if err != nil {
			return cursor, err
		}
		if cursor, read = next, read+n; cursor == 0 {
			return 0, nil
		}
	}
	return cursor, nil
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
	if cause == l.cause && now.Sub(l.logged) < penaltyStepLogGap {
		return
	}
	logger.Warn("redis penalties: a step fails", "step", l.step, "cause", cause, "failures", l.failures)
	l.cause, l.logged, l.failures = cause, now, 0
}
