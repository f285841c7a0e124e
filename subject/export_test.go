package subject

// ErrUnidentified is what Resolve returns when no source identified the
// request; exported for the external test package only.
var ErrUnidentified = errUnidentified

// ChainVerdicts is how many connections' chain verdicts r holds.
func (r *Resolver) ChainVerdicts() int {
	n := 0
	r.certs.table.Range(func(any, any) bool { n++; return true })
	return n
}
