package limiter

import (
	"context"
	"errors"
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

// resettable is the check Reset makes of req before it writes.
func resettable(ctx context.Context, req Request) error {
	if req.Policies == nil || req.Subject == "" {
		return errors.New("reset: no policy or no subject")
	}
	return ctx.Err()
}
