package edge

// SetRetryAboveHandshakes changes, before Serve, how many unvalidated
// QUIC handshakes may be in flight before new ones get a Retry.
func SetRetryAboveHandshakes(s *Servers, n int64) { s.quic.retryAbove = n }
