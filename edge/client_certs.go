package edge

import (
	"crypto/tls"
	"crypto/x509"
	"sync/atomic"
)

// The values of TLSOptions.ClientAuth, as the tls block names them.
const (
	// ClientAuthRequire ends the handshake of a client that sends no
	// certificate, or one whose chain does not verify against ClientCAs.
	ClientAuthRequire = "require"
	// ClientAuthRequest asks for a certificate and never ends a handshake
	// over it: a client without one, or with one that does not verify,
	// connects, and has no client_cert subject.
	ClientAuthRequest = "request"
)

// DefaultClientAuth is the client_auth of a tls block that has ClientCAs.
const DefaultClientAuth = ClientAuthRequire

// clientAuth asks HTTPS clients for certificates. Its roots are swapped on
// reload (SwapClientCAs); handshakes from then on use the new ones.
type clientAuth struct {
	require bool
	roots   atomic.Pointer[x509.CertPool]
}

func newClientAuth(t *TLSOptions) *clientAuth {
	if t == nil || t.ClientCAs == nil {
		return nil
	}
	a := &clientAuth{require: t.ClientAuth != ClientAuthRequest}
	a.roots.Store(t.ClientCAs)
	return a
}

// apply makes cfg ask for client certificates. Under require, crypto/tls
// verifies the chain in the handshake, so that a client is told why it was
// refused (unknown_ca, certificate_expired, certificate_required), and
// checks a resumed session's chain against the roots in force, or does not
// resume it. Under request it only asks: the client_cert subject verifies
// the chain (by crypto/tls's rule), and a chain that does not verify is
// simply no subject. Either way the certificate request names the roots'
// subjects, so that a client holding several certificates can pick the
// right one.
//
// ACME TLS-ALPN-01 validation connections are asked too, and send no
// certificate; under TLS 1.3 (what validators speak) the validator has
// read the challenge certificate before the server answers its empty
// certificate, so validation passes under require as well.
//
// cfg's ClientCAs are those of the handshakes before any swap; afterwards
// GetConfigForClient hands each handshake a copy of cfg with the current
// roots, made once per swap.
func (a *clientAuth) apply(cfg *tls.Config) {
	if a == nil {
		return
	}
	cfg.ClientAuth = tls.RequestClientCert
	if a.require {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	base := a.roots.Load()
	cfg.ClientCAs = base
	var swapped atomic.Pointer[tls.Config]
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		roots := a.roots.Load()
		if roots == base {
			return nil, nil
		}
		if c := swapped.Load(); c != nil && c.ClientCAs == roots {
			return c, nil
		}
		c := cfg.Clone()
		c.ClientCAs, c.GetConfigForClient = roots, nil
		swapped.Store(c)
		return c, nil
	}
}
