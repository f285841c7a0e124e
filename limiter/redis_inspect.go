package limiter

import (
	"context"
	"fmt"
)

// Peek reports each of req's policies' state for req.Subject, read by the
// rate-limit script at cost 0, which writes nothing (lua/prelude.lua), over
// the policies' keys alone: no evaluation is recorded, and no denial
// remembered or answered from this instance's cache. (A concurrency
// policy's expired leases are dropped from its set, as any call does: they
// hold nothing.)
func (r *Redis) Peek(ctx context.Context, req Request) Outcome {
	if o := peekable(ctx, req); o != nil {
		return o
	}
	set := req.Policies
	return r.decide(ctx, set, r.command(set, req.Subject, scriptCall{phase: Admission}), nil)
}

// Reset deletes req.Subject's state for each of req's policies, with the
// evaluations remembered in it and the leases it holds (its lease set);
// the keys share the subject's hash tag, so one
// Cluster slot and one DEL. It then forgets this instance's remembered
// denials of the subject and publishes the subject on the resets channel,
// so that every instance sharing this Redis forgets its own (see
// subscribeResets). The state is gone once Reset returns nil; a publish
// that fails is an error too, though the state was reset.
func (r *Redis) Reset(ctx context.Context, req Request) error {
	if err := resettable(ctx, req); err != nil {
		return err
	}
	keys := r.keys(req.Policies, req.Subject)
	del := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		del = append(del, k, k+":l")
	}
	if err := r.client.Del(ctx, del...).Err(); err != nil {
		return fmt.Errorf("reset: delete the state: %w", err)
	}
	if err := r.forgetSubject(ctx, req.Subject); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	return nil
}
