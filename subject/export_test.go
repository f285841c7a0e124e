package subject

// ErrUnidentified is what Resolve returns when no source identified the
// request; exported for the external test package only.
var ErrUnidentified = errUnidentified

// ChainVerdicts is how many connections' chain verdicts r holds.
func (r *Resolver) ChainVerdicts() int {
	r.certs.mu.Lock()
	defer r.certs.mu.Unlock()
	return len(r.certs.until)
}
