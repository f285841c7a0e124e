package limiter

import (
	"context"
	"errors"
	"time"
)

// Override changes one subject's limit of one policy until it expires:
// a policy's limit (a window's, a concurrency policy's) or capacity (a
// token bucket's). It is kept by the backend, beside the subject's state,
// across reloads; one whose policy a reload removed or changed (its name
// or revision) is kept, and applies to nothing.
type Override struct {
	// Route, Policy and Pseudonym name it: one override per subject,
	// route and policy.
	Route, Policy, Pseudonym string
	// Revision is the policy's when the override was set: a policy of
	// another revision keeps another state, which the override does not
	// touch.
	Revision int64
	// SubjectKind and Plan are what the subject was named as; for the
	// admin API's listing.
	SubjectKind, Plan string
	Limit             int64
	Expires           time.Time
	// at is where the backend keeps it: the Redis key, or the memory key.
	at string
}

// id is the override's name among the others.
func (o *Override) id() string { return o.Route + "\x00" + o.Policy + "\x00" + o.Pseudonym }

// Overrides keeps a backend's overrides. Set and Delete apply on every
// instance that shares the backend before they return (on Redis the
// script reads the override with the subject's state, and the instances'
// remembered denials and leases of budget of the subject are dropped);
// an expired override is gone by itself.
type Overrides interface {
	// Set makes o the override of req's policy i for req.Subject.
	Set(ctx context.Context, req Request, i int, o Override) error
	// Delete removes the override of route, policy and pseudonym; false
	// when there was none.
	Delete(ctx context.Context, route, policy, pseudonym string) (bool, error)
	// List returns the overrides in force.
	List(ctx context.Context) ([]Override, error)
}

// MaxOverrideLimit bounds an override's limit: a count the Redis script
// holds exactly (a Lua number).
const MaxOverrideLimit = 1 << 50

// CheckOverride reports what makes o no override: a limit out of bounds,
// or an expiry not after now.
func CheckOverride(o Override, now time.Time) error {
	switch {
	case o.Limit < 1 || o.Limit > MaxOverrideLimit:
		return errors.New("limit must be at least 1 and at most 2^50")
	case !o.Expires.After(now):
		return errors.New("expires must be in the future")
	}
	return nil
}

// overridden is p with the limit an override gives it: its limit, or a
// token bucket's capacity.
func overridden(p *Policy, limit int64) *Policy {
	q := *p
	if q.Algorithm == TokenBucket {
		q.Capacity = limit
	} else {
		q.Limit = limit
	}
	return &q
}
