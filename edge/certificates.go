package edge

import (
	"crypto/tls"
	"errors"
	"fmt"
	"sync/atomic"
)

// CertificateFiles names one PEM certificate chain and its key.
type CertificateFiles struct {
	CertFile, KeyFile string
}

// staticCertificates are the certificates of the HTTPS listener that come
// from files, chosen by SNI. swap replaces them for every handshake from then
// on; connections already established keep theirs.
type staticCertificates struct {
	current atomic.Pointer[[]tls.Certificate]
}

// loadCertificates reads every pair; any unreadable pair fails the whole set,
// so a reload never half-applies.
func loadCertificates(files []CertificateFiles) ([]tls.Certificate, error) {
	certs := make([]tls.Certificate, 0, len(files))
	for _, f := range files {
		c, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("edge: load certificate %s: %w", f.CertFile, err)
		}
		certs = append(certs, c)
	}
	return certs, nil
}

func (c *staticCertificates) swap(certs []tls.Certificate) { c.current.Store(&certs) }

var errNoCertificate = errors.New("edge: no certificate for this name")

// forHello returns the first certificate that covers the client's SNI and
// suits its signature algorithms, or nil.
func (c *staticCertificates) forHello(hello *tls.ClientHelloInfo) *tls.Certificate {
	p := c.current.Load()
	if p == nil {
		return nil
	}
	certs := *p
	for i := range certs {
		if hello.SupportsCertificate(&certs[i]) == nil {
			return &certs[i]
		}
	}
	return nil
}

// fallback is the first certificate, for clients that send no SNI.
func (c *staticCertificates) fallback() *tls.Certificate {
	p := c.current.Load()
	if p == nil || len(*p) == 0 {
		return nil
	}
	return &(*p)[0]
}
