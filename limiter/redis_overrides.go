package limiter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Overrides on Redis. An override is a string beside its policy's state
// key, under the subject's hash tag (<state key>:o, the limit, expiring
// when the override does, on Redis's clock), which the rate-limit script
// reads with the state in the same call: no call of its own, and every
// instance decides by it from the moment it is set. The list the admin
// API reads is one hash, <prefix>overrides, each field an override's id
// and its value the override as JSON; an expired one is dropped when the
// list is read. Setting and deleting publish the subject on the resets
// channel, so that every instance forgets what it remembers of the
// subject: denials, and leases of budget taken under the old limit.

// redisOverrides are a Redis backend's overrides.
type redisOverrides struct{ r *Redis }

// Overrides are the backend's overrides.
func (r *Redis) Overrides() Overrides { return redisOverrides{r} }

func (r *Redis) overridesKey() string { return r.prefix + "overrides" }

// overrideRecord is an Override as the list holds it.
type overrideRecord struct {
	Route       string    `json:"route"`
	Policy      string    `json:"policy"`
	Revision    int64     `json:"revision"`
	Pseudonym   string    `json:"pseudonym"`
	SubjectKind string    `json:"subject_kind"`
	Plan        string    `json:"plan,omitempty"`
	Limit       int64     `json:"limit"`
	Expires     time.Time `json:"expires"`
	Key         string    `json:"key"`
}

func (o redisOverrides) Set(ctx context.Context, req Request, i int, ov Override) error {
	r := o.r
	if err := CheckOverride(ov, time.Now()); err != nil {
		return err
	}
	ov.at = r.keys(req.Policies, req.Subject)[i] + ":o"
	rec, err := json.Marshal(overrideRecord{Route: ov.Route, Policy: ov.Policy, Revision: ov.Revision, Pseudonym: ov.Pseudonym, SubjectKind: ov.SubjectKind,
		Plan: ov.Plan, Limit: ov.Limit, Expires: ov.Expires.UTC(), Key: ov.at})
	if err != nil {
		return err
	}
	if err := r.client.HSet(ctx, r.overridesKey(), ov.id(), rec).Err(); err != nil {
		return fmt.Errorf("override: list it: %w", err)
	}
	if err := r.client.Do(ctx, "SET", ov.at, strconv.FormatInt(ov.Limit, 10), "PXAT", ov.Expires.UnixMilli()).Err(); err != nil {
		return fmt.Errorf("override: set it: %w", err)
	}
	return r.forgetSubject(ctx, req.Subject)
}

func (o redisOverrides) Delete(ctx context.Context, route, policy, pseudonym string) (bool, error) {
	r := o.r
	id := (&Override{Route: route, Policy: policy, Pseudonym: pseudonym}).id()
	raw, err := r.client.HGet(ctx, r.overridesKey(), id).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("override: read it: %w", err)
	}
	var rec overrideRecord
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		return false, fmt.Errorf("override: read it: %w", err)
	}
	if err := r.client.Del(ctx, rec.Key).Err(); err != nil {
		return false, fmt.Errorf("override: delete it: %w", err)
	}
	if err := r.client.HDel(ctx, r.overridesKey(), id).Err(); err != nil {
		return false, fmt.Errorf("override: take it off the list: %w", err)
	}
	return rec.Expires.After(time.Now()), r.forgetSubject(ctx, pseudonym)
}

func (o redisOverrides) List(ctx context.Context) ([]Override, error) {
	r := o.r
	all, err := r.client.HGetAll(ctx, r.overridesKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("overrides: read the list: %w", err)
	}
	now := time.Now()
	var out []Override
	var expired []string
	for id, raw := range all {
		var rec overrideRecord
		if json.Unmarshal([]byte(raw), &rec) != nil || !rec.Expires.After(now) {
			expired = append(expired, id)
			continue
		}
		out = append(out, Override{Route: rec.Route, Policy: rec.Policy, Revision: rec.Revision, Pseudonym: rec.Pseudonym, SubjectKind: rec.SubjectKind,
			Plan: rec.Plan, Limit: rec.Limit, Expires: rec.Expires, at: rec.Key})
	}
	if len(expired) > 0 {
		// Their keys expired by themselves.
		r.client.HDel(ctx, r.overridesKey(), expired...)
	}
	return out, nil
}

// forgetSubject forgets this instance's remembered denials and leases of
// budget of subject, and has every other instance sharing this Redis do
// the same (subscribeResets).
func (r *Redis) forgetSubject(ctx context.Context, subject string) error {
	if r.denials != nil {
		r.denials.forget(subject)
	}
	r.budget.forget(subject)
	if err := r.client.Publish(ctx, r.resetsChannel(), subject).Err(); err != nil {
		return fmt.Errorf("tell the other instances: %w", err)
	}
	return nil
}
