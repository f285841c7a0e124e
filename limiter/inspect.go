package limiter

import (
	"context"
	"errors"
	"fmt"
)

// An operator's view of one subject: Peek reads the state of a request's
// policies for its subject as a request of no cost would find it, and
// Reset forgets it. Neither is on the request path. Both take a Request
// so that the policies and the pseudonym are named exactly as the request
// path names them; its Cost, EvaluationID and Deadline are not read.

// peekable is the check Peek makes of req before it reads: the policies
// Evaluate would take, and a live context.
func peekable(ctx context.Context, req Request) Outcome {
	// Nothing is charged and no lease taken: the policies need only be
	// known, with a cost and a lease ID admit takes.
	req.Cost, req.EvaluationID = 1, "peek"
	return admit(ctx, req)
}

// Peek reports each of req's policies' state for req.Subject, read under
// the shard's lock: each policy's decision for a request of cost 0 (its
// Remaining what a request would have left to spend, its ResetAfter when
// it is whole again). Nothing is charged, written or remembered.
func (m *Memory) Peek(ctx context.Context, req Request) Outcome {
	if o := peekable(ctx, req); o != nil {
		return o
	}
	ps := req.Policies.list
	each := make([]Decision, len(ps))
	var keyBuf [160]byte
	for i, p := range ps {
		key := m.sum(appendMemoryKey(keyBuf[:0], p, req.Subject))
		s := &m.shards[key[0]%memoryShards]
		s.mu.Lock()
		nowMillis := m.clock.Now().UnixMilli()
		j, e := s.find(key)
		if j == 0 || e.expiresAt <= nowMillis {
			e = nil
		}
		st := s.current(key, e, p, nowMillis)
		s.mu.Unlock()
		res := decide(p, st, nowMillis, 0, Admission, false)
		if res.clockUnsafe {
			return Unavailable{Category: ClockUnsafe}
		}
		each[i] = res.decision
	}
	return evaluated(ps, each)
}

// Reset forgets req.Subject's state for each of req's policies, the
// evaluations remembered with it, and the leases it holds (a request
// still in flight then releases nothing): its next request starts with
// whole budgets.
func (m *Memory) Reset(ctx context.Context, req Request) error {
	if err := resettable(ctx, req); err != nil {
		return err
	}
	var keyBuf [160]byte
	for _, p := range req.Policies.list {
		key := m.sum(appendMemoryKey(keyBuf[:0], p, req.Subject))
		s := &m.shards[key[0]%memoryShards]
		s.mu.Lock()
		if i, _ := s.find(key); i != 0 {
			s.remove(i)
		}
		delete(s.leases, key)
		s.mu.Unlock()
	}
	return nil
}

// resettable is the check Reset makes of req before it writes.
func resettable(ctx context.Context, req Request) error {
	if req.Policies == nil || req.Subject == "" {
		return errors.New("reset: no policy or no subject")
	}
	return ctx.Err()
}

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
	if r.denials != nil {
		r.denials.forget(req.Subject)
	}
	r.budget.forget(req.Subject)
	if err := r.client.Publish(ctx, r.resetsChannel(), req.Subject).Err(); err != nil {
		return fmt.Errorf("reset: tell the other instances: %w", err)
	}
	return nil
}

// Peek is the shared backend's: the fallback's own state is of an outage.
func (f *fallback) Peek(ctx context.Context, req Request) Outcome {
	return f.shared.Peek(ctx, req)
}

// Reset resets the subject on the shared backend and in the fallback's own
// state, so that neither holds a spent budget for it.
func (f *fallback) Reset(ctx context.Context, req Request) error {
	if err := f.shared.Reset(ctx, req); err != nil {
		return err
	}
	local := req
	local.Policies = f.scaleAll(req.Policies)
	return f.local.Reset(ctx, local)
}
