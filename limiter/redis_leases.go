package limiter

import (
	"context"
	"strconv"
	"time"
)

// leaseCallTimeout bounds a release or renewal sent to Redis, a release
// from when it is queued. Neither is on a request's path: a release that
// runs out is recovered by expiry.
const leaseCallTimeout = time.Second

// release queues the release of req's leases (redis_background.go) and
// returns at once: the response it ends is never kept waiting. A release
// that fails, or is dropped, is recovered by the leases' expiry
// (LeaseTTL).
func (r *Redis) release(req Request, leased Evaluated) {
	keys, args := r.leaseCall(req, leased, "release")
	if keys == nil {
		return
	}
	r.inBackground(callRelease, r.leaseScript.call(keys, args), func() {})
}

// renew gives req's leases another LeaseTTL, by the policies' clock.
func (r *Redis) renew(ctx context.Context, req Request, leased Evaluated) {
	keys, args := r.leaseCall(req, leased, "renew")
	if keys == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, leaseCallTimeout)
	defer cancel()
	r.evalsha(ctx, r.leaseScript.call(keys, args))
}

// leaseCall is the lease script's keys and ARGV for op on req's leases
// (lua/lease.lua): each concurrency policy's lease set, under the
// subject's hash tag. nil keys: req holds no lease.
func (r *Redis) leaseCall(req Request, leased Evaluated, op string) ([]string, []any) {
	if leased.Fallback || !holdsLeases(req, leased) {
		return nil, nil
	}
	var keys []string
	args := []any{op, req.EvaluationID, req.Cost}
	for i, p := range req.Policies.list {
		if !p.HoldsLeases() {
			continue
		}
		keys = append(keys, r.key(req.Policies, i, req.Subject)+":l")
		now := ""
		if p.Clock == ClockGateway {
			now = strconv.FormatInt(r.clock.Now().UnixMilli(), 10)
		}
		args = append(args, now, p.LeaseTTL.Milliseconds(), p.CleanupGrace.Milliseconds())
	}
	return keys, args
}

// WaitReleases returns once every call queued in the background before
// it has been answered, timed out or been dropped.
func (r *Redis) WaitReleases() { r.releases.Wait() }
