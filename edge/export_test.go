package edge

// SetRetryAboveHandshakes changes, before Serve, how many unvalidated
// QUIC handshakes may be in flight before new ones get a Retry.
func SetRetryAboveHandshakes(s *Servers, n int64) { s.quic.retryAbove = n }

// JA4Of is the fingerprint of a ClientHello with these fields, as the
// handshake computes it from tls.ClientHelloInfo.
func JA4Of(quic bool, versions, ciphers, extensions, signatures []uint16, alpn []string) string {
	return ja4(helloFields{quic: quic, versions: versions, ciphers: ciphers, extensions: extensions, signatures: signatures, alpn: alpn})
}
