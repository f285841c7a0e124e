package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"time"
)

// SetLogClock makes h's access log throttle read the time from now.
func SetLogClock(h *Handler, now func() time.Time) { h.refusals.Now = now }

// TrustUpstreams makes the transports of h's current pools trust the
// certificates of roots, for upstreams with a test certificate.
func TrustUpstreams(h *Handler, roots *x509.CertPool) {
	for _, p := range h.current.Load().pools {
		if p.owned != nil {
			p.owned.std.TLSClientConfig = &tls.Config{RootCAs: roots}
		}
	}
}
