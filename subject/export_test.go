package subject

// ErrUnidentified is what Resolve returns when no source identified the
// request; exported for the external test package only.
var ErrUnidentified = errUnidentified
