package subject_test

import (
	"crypto/tls"
	"crypto/x509"
	"testing"

	"github.com/edgegate/gateway/subject"
)

// BenchmarkClientCert measures what the client_cert source costs a
// request: on a connection whose chain was verified before (every request
// but its first), and on a new connection (a chain verification), for
// each identity.
func BenchmarkClientCert(b *testing.B) {
	ca, caKey := certificate(b, nil, nil, "", "")
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	leaf, _ := certificate(b, ca, caKey, "spiffe://example.org/orders", "orders.internal")
	r, err := subject.NewResolver(subject.Options{ClientCAs: roots, PseudonymKeys: map[int][]byte{1: []byte(fakeSecret)}, PseudonymVersion: 1})
	if err != nil {
		b.Fatal(err)
	}
	for _, identity := range []subject.CertIdentity{subject.SPKI, subject.URISAN, subject.DNSSAN} {
		for _, known := range []bool{true, false} {
			name := identity.String() + "/known-connection"
			if !known {
				name = identity.String() + "/new-connection"
			}
			b.Run(name, func(b *testing.B) {
				q := subject.Query{Sources: []subject.Kind{subject.ClientCert}, OperationID: "orders.read", CertIdentity: identity}
				req := request("192.0.2.1:5000")
				req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
				b.ReportAllocs()
				for b.Loop() {
					if !known {
						// A new handshake's leaf (the parse is not timed).
						b.StopTimer()
						c, _ := x509.ParseCertificate(leaf.Raw)
						req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}}
						b.StartTimer()
					}
					if s, err := r.Resolve(req, q); err != nil || s.Kind != subject.ClientCert {
						b.Fatal(s, err)
					}
				}
			})
		}
	}
}
