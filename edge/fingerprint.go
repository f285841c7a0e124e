package edge

import (
	"context"
	"crypto/tls"
	"net"
)

// fingerprint is the JA4 of one connection's ClientHello. It is written
// once, during the handshake, before any request of the connection is
// read, and only read after.
type fingerprint struct {
	quic bool
	ja4  string
}

type fingerprintKey struct{}

// withFingerprint gives a connection's handshake context the place its
// fingerprint is recorded in (recordFingerprints).
func withFingerprint(ctx context.Context, quic bool) (context.Context, *fingerprint) {
	f := &fingerprint{quic: quic}
	return context.WithValue(ctx, fingerprintKey{}, f), f
}

// recordFingerprints makes cfg record each ClientHello's JA4 in the
// handshake's context (withFingerprint), then ask cfg's own
// GetConfigForClient, if any.
func recordFingerprints(cfg *tls.Config) {
	next := cfg.GetConfigForClient
	cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		if f, ok := hello.Context().Value(fingerprintKey{}).(*fingerprint); ok {
			f.ja4 = JA4(f.quic, hello)
		}
		if next == nil {
			return nil, nil
		}
		return next(hello)
	}
}

// fingerprintedConn is a TCP connection whose TLS handshake recorded its
// fingerprint: the framing listener hands it to tls.Server, so that the
// server's connContext finds the fingerprint under the *tls.Conn.
type fingerprintedConn struct {
	net.Conn
	fingerprint *fingerprint
}

// connFingerprint is the fingerprint of a connection the HTTPS listener
// delivered, or nil.
func connFingerprint(c net.Conn) *fingerprint {
	if fc, ok := c.(*framingConn); ok {
		c = fc.Conn
	}
	tc, ok := c.(*tls.Conn)
	if !ok {
		return nil
	}
	if fc, ok := tc.NetConn().(*fingerprintedConn); ok {
		return fc.fingerprint
	}
	return nil
}

// JA4Of is the JA4 fingerprint of the TLS connection a request (its
// context) came on, on the HTTPS listener or HTTP/3; "" for a plain-HTTP
// request, or one whose handshake gave none.
func JA4Of(ctx context.Context) string {
	if f, ok := ctx.Value(fingerprintKey{}).(*fingerprint); ok {
		return f.ja4
	}
	return ""
}
