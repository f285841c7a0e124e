package limiter

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Penalties on Redis. Each instance keeps the penalties in force in its
// own memory (a penaltyBook), and the request path asks only that: a
// penalty costs no Redis call per request. The instance whose policy
// refused records the penalty in its book at once, and tells the others
// over the resets subscription (redis_resets.go), on a channel of its own
// beside the resets one, <prefix>penalties: each message is a penalty as
// JSON (pseudonym, route, policy, start, end) or a lift. A publish reaches
// every subscriber within milliseconds, Cluster included, which the
// script's keys could match only with a read per request.
//
// A subscriber misses what is published while it is not subscribed (it
// is starting, or its connection broke). So each penalty is also a field
// of one hash, <prefix>penalties, and every (re)subscription reads the
// hash back into the book; fields past their end are dropped when read.
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
	rec, err := json.Marshal(penaltyRecord{Route: pen.Route, Policy: pen.Policy, Pseudonym: pen.Pseudonym, Start: pen.Start.UTC(), Until: pen.Until.UTC()})
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
	rec, _ := json.Marshal(penaltyRecord{Route: route, Pseudonym: pseudonym, Lifted: true})
	if err := r.client.Publish(ctx, r.penaltiesChannel(), rec).Err(); err != nil {
		return found, fmt.Errorf("penalty: tell the other instances: %w", err)
	}
	return found, nil
}

// penaltyMessage applies a message of the penalties channel to the book.
func (r *Redis) penaltyMessage(payload string) {
	var rec penaltyRecord
	if json.Unmarshal([]byte(payload), &rec) != nil {
		return
	}
	now := time.Now()
	if rec.Lifted {
		r.penalties.lift(rec.Route, rec.Pseudonym, now)
		return
	}
	r.penalties.put(rec.penalty(), now)
}

// loadPenalties reads the hash of penalties into the book, and drops the
// fields that have ended.
func (r *Redis) loadPenalties() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	all, err := r.client.HGetAll(ctx, r.penaltiesKey()).Result()
	if err != nil {
		return // the next (re)subscription reads it again
	}
	now := time.Now()
	var ended []string
	for field, raw := range all {
		var rec penaltyRecord
		if json.Unmarshal([]byte(raw), &rec) != nil || !rec.Until.After(now) {
			ended = append(ended, field)
			continue
		}
		r.penalties.put(rec.penalty(), now)
	}
	if len(ended) > 0 {
		r.client.HDel(ctx, r.penaltiesKey(), ended...)
	}
}
