package limiter

import (
	"context"
	"strconv"
	"time"
)

// leaseCallTimeout bounds a release or renewal sent to Redis. Neither is
// on a request's path: a release that runs out is recovered by expiry.
const leaseCallTimeout = time.Second

// release sends the release of req's leases in the background, through
// the node's batcher, and returns at once: the response it ends is never
// kept waiting. A release that fails, or is lost, is recovered by the
// leases' expiry (LeaseTTL).
func (r *Redis) release(req Request, leased Evaluated) {
	keys, args := r.leaseCall(req, leased, "release")
	if keys == nil {
		return
	}
	r.inBackground(r.leaseScript.call(keys, args), func() {})
}

// inBackground sends cmd off the caller's path, within leaseCallTimeout,
// then calls done; Close and WaitReleases wait for it.
func (r *Redis) inBackground(cmd []any, done func()) {
	r.releases.Add(1)
	go func() {
		defer r.releases.Done()
		ctx, cancel := context.WithTimeout(context.Background(), leaseCallTimeout)
		defer cancel()
		r.evalsha(ctx, cmd)
		done()
	}()
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

// WaitReleases returns once every release sent in the background before
// the call has been answered, or has timed out.
func (r *Redis) WaitReleases() { r.releases.Wait() }
