package subject

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"runtime"
	"strings"
	"sync"
	"time"
	"weak"
)

// CertIdentity is what of a verified client certificate identifies the
// client_cert subject: a route's client_cert_identity.
type CertIdentity uint8

const (
	// SPKI is the SHA-256 of the leaf's SubjectPublicKeyInfo, in lower-case
	// hex: it stays the same across renewals that keep the key.
	SPKI CertIdentity = iota
	// URISAN is the leaf's first URI subject alternative name (a SPIFFE
	// ID, say).
	URISAN
	// DNSSAN is the leaf's first DNS subject alternative name, in lower
	// case.
	DNSSAN
)

// DefaultCertIdentity is the identity of a route that names none.
const DefaultCertIdentity = SPKI

func (c CertIdentity) String() string {
	switch c {
	case URISAN:
		return "uri_san"
	case DNSSAN:
		return "dns_san"
	}
	return "spki"
}

// ParseCertIdentity maps a configuration name to a CertIdentity.
func ParseCertIdentity(s string) (CertIdentity, bool) {
	for _, c := range []CertIdentity{SPKI, URISAN, DNSSAN} {
		if c.String() == s {
			return c, true
		}
	}
	return 0, false
}

// of is c's identity of leaf, "" when leaf has none of that kind. A name
// with a control character is none: it could not be a header's value.
func (c CertIdentity) of(leaf *x509.Certificate) string {
	id := c.raw(leaf)
	for i := 0; i < len(id); i++ {
		if id[i] < 0x20 || id[i] == 0x7f {
			return ""
		}
	}
	return id
}

func (c CertIdentity) raw(leaf *x509.Certificate) string {
	switch c {
	case URISAN:
		if len(leaf.URIs) > 0 {
			return leaf.URIs[0].String()
		}
	case DNSSAN:
		if len(leaf.DNSNames) > 0 {
			return strings.ToLower(leaf.DNSNames[0])
		}
	default:
		sum := sha256.Sum256(leaf.RawSubjectPublicKeyInfo)
		return hex.EncodeToString(sum[:])
	}
	return ""
}

// canonical frames identity with c's name, so that the identities of two
// kinds never sign alike.
func (c CertIdentity) canonical(identity string) string {
	return c.String() + ":" + identity
}

// named is the canonical identity of one an operator names: a key's hex
// digest or a DNS name in any case.
func (c CertIdentity) named(identity string) string {
	if c != URISAN {
		identity = strings.ToLower(identity)
	}
	return c.canonical(identity)
}

// verifyClientChain verifies the chain a client presented, leaf first,
// against roots at now, for client authentication: crypto/tls's rule for
// a server that verifies client certificates, so that the client_cert
// subject believes what a handshake under client_auth "require" lets in.
// It returns when the verified chain stops verifying (its earliest
// expiry).
func verifyClientChain(roots *x509.CertPool, certs []*x509.Certificate, now time.Time) (time.Time, error) {
	if len(certs) == 0 {
		return time.Time{}, errors.New("no client certificate")
	}
	opts := x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if len(certs) > 1 {
		opts.Intermediates = x509.NewCertPool()
		for _, c := range certs[1:] {
			opts.Intermediates.AddCert(c)
		}
	}
	chains, err := certs[0].Verify(opts)
	if err != nil {
		return time.Time{}, err
	}
	// The chain that lasts longest: a client stays identified while any
	// chain of its verifies.
	var best time.Time
	for _, chain := range chains {
		end := chain[0].NotAfter
		for _, c := range chain[1:] {
			if c.NotAfter.Before(end) {
				end = c.NotAfter
			}
		}
		if end.After(best) {
			best = end
		}
	}
	return best, nil
}

// chainVerdicts remembers, per connection, whether the client's chain
// verified and the leaf's identities, so that a connection's chain is
// verified and its identities worked out on its first request only. A
// connection is known by its leaf certificate: crypto/tls parses the chain
// once per handshake and hands every request of the connection the same
// *x509.Certificate. Keys are weak, and an entry goes once its leaf is
// garbage, so the table holds the live connections' leaves only; a weak
// pointer never equals one made to another object at the same address.
type chainVerdicts struct {
	roots *x509.CertPool
	now   func() time.Time
	table sync.Map // weak.Pointer[x509.Certificate] to *verdict
}

// verdict is what a connection's chain gave: when it stops verifying (its
// earliest expiry; the zero Time: it did not verify), and the leaf's
// canonical identities by CertIdentity, "" where it has none. It holds no
// pointer to the leaf, which would keep the leaf, and the entry, alive.
type verdict struct {
	until      time.Time
	identities [3]string
}

func newChainVerdicts(roots *x509.CertPool, now func() time.Time) *chainVerdicts {
	return &chainVerdicts{roots: roots, now: now}
}

// verified is the verdict of the chain state presents when that chain
// verifies against the roots now, else nil.
func (v *chainVerdicts) verified(state *tls.ConnectionState) *verdict {
	if v == nil || state == nil || len(state.PeerCertificates) == 0 {
		return nil
	}
	leaf := state.PeerCertificates[0]
	key := weak.Make(leaf)
	now := v.now()
	var d *verdict
	if known, ok := v.table.Load(key); ok {
		d = known.(*verdict)
	}
	if d == nil || (!d.until.IsZero() && !now.Before(d.until)) {
		d = &verdict{}
		if d.until, _ = verifyClientChain(v.roots, state.PeerCertificates, now); !d.until.IsZero() {
			for _, c := range []CertIdentity{SPKI, URISAN, DNSSAN} {
				if id := c.of(leaf); id != "" {
					d.identities[c] = c.canonical(id)
				}
			}
		}
		if _, again := v.table.Swap(key, d); !again {
			runtime.AddCleanup(leaf, v.forget, key)
		}
	}
	if d.until.IsZero() || !now.Before(d.until) {
		return nil
	}
	return d
}

func (v *chainVerdicts) forget(key weak.Pointer[x509.Certificate]) { v.table.Delete(key) }

// clientCert is the canonical identity, as c gives it, of the request's
// client certificate when its chain verifies; "" when there is none.
func (in Inbound) clientCert(c CertIdentity) string {
	d := in.r.certs.verified(in.req.TLS)
	if d == nil || int(c) >= len(d.identities) {
		return ""
	}
	return d.identities[c]
}

// ClientCert is the identity, as c gives it, of the request's client
// certificate when its chain verifies against Options.ClientCAs; false
// when there is none. It is the raw identity: only the upstream may see
// it (a route's client_cert_header), never a log, metric or Redis key.
func (in Inbound) ClientCert(c CertIdentity) (string, bool) {
	canonical := in.clientCert(c)
	if canonical == "" {
		return "", false
	}
	return canonical[len(c.String())+1:], true
}

// ForwardClientCert sets the request's q.CertHeader to the identity of its
// verified client certificate, and removes whatever the client sent under
// that name: the upstream believes the header because only the gateway
// writes it. It does nothing on a route without a CertHeader.
func (in Inbound) ForwardClientCert(q Query) {
	if q.CertHeader == "" {
		return
	}
	h := in.req.Header
	delete(h, q.CertHeader)
	if id, ok := in.ClientCert(q.CertIdentity); ok {
		h[q.CertHeader] = []string{id}
	}
}
