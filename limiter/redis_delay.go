package limiter

// giveBack sends the give-back of req's place in the background, like a
// release: the rate-limit script in the give-back phase, which reads and
// deletes the request's reservation record. A give-back that fails, or
// is lost, leaves the place taken: the budget is spent as if the request
// had gone on. Once it is done this instance forgets the denials it
// remembers of the subject, which the place given back may end; another
// instance's stand until their retry time, refusing no more than they
// would have without the give-back.
func (r *Redis) giveBack(req Request, reserved Evaluated) {
	if reserved.Fallback || Held(req, reserved) == 0 || req.EvaluationID == "" {
		return
	}
	set := req.Policies
	cmd := r.command(set, req.Subject, scriptCall{cost: req.Cost, phase: givingBack, mayDelay: true, id: req.EvaluationID})
	r.inBackground(callGiveBack, cmd, func() {
		if r.denials != nil {
			r.denials.forget(req.Subject)
		}
	})
}
