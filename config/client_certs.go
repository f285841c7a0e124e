package config

import (
	"crypto/x509"
	"encoding/pem"
	"slices"

	"github.com/edgegate/gateway/subject"
)

// maxClientCAFileBytes bounds client_ca_file: thousands of roots.
const maxClientCAFileBytes = 16 << 20

// clientCAs reads the tls block's client_ca_file: PEM certificates and
// nothing else (a key in it is a mistake to point at, not to skip). A
// file that cannot be used is reported, and gives an empty pool, so that
// what depends on the file is not reported again.
func (c *checker) clientCAs(b *tlsBlock) *x509.CertPool {
	if b.ClientCAFile == nil {
		return nil
	}
	rng := valueRange(b.Body, "client_ca_file")
	path := c.path(*b.ClientCAFile)
	pool := x509.NewCertPool()
	src, err := readFile(path, maxClientCAFileBytes)
	if err != nil {
		c.errorf(rng, "Cannot read client_ca_file", "%s.", err)
		return pool
	}
	n := 0
	for {
		var block *pem.Block
		if block, src = pem.Decode(src); block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			c.errorf(rng, "Invalid client_ca_file", "%s holds a %s block; it must hold CA certificates only.", path, block.Type)
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			c.errorf(rng, "Invalid client_ca_file", "certificate %d of %s: %s.", n+1, path, err)
			continue
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		c.errorf(rng, "Invalid client_ca_file", "%s holds no PEM certificate.", path)
	}
	return pool
}

// clientCertRoute reads a route's client_cert_identity and
// client_cert_header; sources are the route's subject
// sources, hasRoots whether the tls block has a client_ca_file.
func (c *checker) clientCertRoute(b *routeBlock, sources []subject.Kind, hasRoots bool) (subject.CertIdentity, string) {
	identity := subject.DefaultCertIdentity
	if b.ClientCertIdentity != nil {
		rng := valueRange(b.Body, "client_cert_identity")
		var ok bool
		if identity, ok = subject.ParseCertIdentity(*b.ClientCertIdentity); !ok {
			c.errorf(rng, "Unknown client_cert_identity", "client_cert_identity is \"spki\", \"uri_san\" or \"dns_san\", not %q.", *b.ClientCertIdentity)
		}
		if b.ClientCertHeader == nil && !slices.Contains(sources, subject.ClientCert) {
			c.errorf(nameRange(b.Body, "client_cert_identity"), "client_cert_identity without client_cert", "client_cert_identity means nothing on a route without the client_cert source or a client_cert_header.")
		}
	}
	header := ""
	if b.ClientCertHeader != nil {
		// What the name may be is proxy.Route.Validate's.
		header = *b.ClientCertHeader
		if !hasRoots {
			c.errorf(valueRange(b.Body, "client_cert_header"), "client_cert_header needs client_ca_file", "Only a certificate that verified is forwarded; set tls.client_ca_file.")
		}
	}
	return identity, header
}
