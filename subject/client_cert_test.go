package subject_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"math/big"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgegate/gateway/subject"
)

// certificate is a certificate of key signed by parent's key (itself
// when parent is nil, a CA).
func certificate(t testing.TB, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, uri, dns string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.KeyUsage = true, true, x509.KeyUsageCertSign
		parent, parentKey = tmpl, key
	}
	if uri != "" {
		u, _ := url.Parse(uri)
		tmpl.URIs = []*url.URL{u}
	}
	if dns != "" {
		tmpl.DNSNames = []string{dns}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c, key
}

// The admin API names a client_cert subject by the identity the route
// reads; Named must give it the pseudonym of the connection that presents
// the certificate.
func TestANamedClientCertIsTheSubjectOfItsConnection(t *testing.T) {
	ca, caKey := certificate(t, nil, nil, "", "")
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	leaf, _ := certificate(t, ca, caKey, "spiffe://example.org/Orders", "Orders.Internal")
	r, err := subject.NewResolver(subject.Options{ClientCAs: roots, PseudonymKeys: map[int][]byte{1: []byte(fakeSecret)}, PseudonymVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(leaf.RawSubjectPublicKeyInfo)
	for _, c := range []struct {
		name     string
		identity subject.CertIdentity
		named    string
	}{
		{"by its key's digest, in any case", subject.SPKI, strings.ToUpper(hex.EncodeToString(sum[:]))},
		{"by its URI, as written", subject.URISAN, "spiffe://example.org/Orders"},
		{"by its DNS name, in any case", subject.DNSSAN, "orders.internal"},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := subject.Query{Sources: []subject.Kind{subject.ClientCert}, OperationID: "op", CertIdentity: c.identity}
			req := request("192.0.2.1:5000")
			req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
			want, err := r.Resolve(req, q)
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.Named(subject.ClientCert, c.named, "", q)
			if err != nil {
				t.Fatal(err)
			}
			if got != want || got.Kind != subject.ClientCert {
				t.Fatalf("named %+v, resolved %+v", got, want)
			}
			// Another identity kind of the same certificate is another
			// subject.
			other := q
			other.CertIdentity = (c.identity + 1) % 3
			if s, _ := r.Resolve(req, other); s.Pseudonym == want.Pseudonym {
				t.Fatalf("%s and %s sign alike", c.identity, other.CertIdentity)
			}
		})
	}
}

// A connection keeps its client_cert subject while its chain verifies:
// not past the leaf's expiry, though the connection stays open, and never
// for a chain to other roots.
func TestAClientCertIsASubjectWhileItsChainVerifies(t *testing.T) {
	ca, caKey := certificate(t, nil, nil, "", "")
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	leaf, _ := certificate(t, ca, caKey, "", "")
	stranger, strangerKey := certificate(t, nil, nil, "", "")
	foreign, _ := certificate(t, stranger, strangerKey, "", "")
	now := time.Now()
	r, err := subject.NewResolver(subject.Options{ClientCAs: roots, Now: func() time.Time { return now },
		PseudonymKeys: map[int][]byte{1: []byte(fakeSecret)}, PseudonymVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	q := subject.Query{Sources: []subject.Kind{subject.ClientCert, subject.ClientIP}, OperationID: "op"}
	kindOf := func(c *x509.Certificate) subject.Kind {
		req := request("192.0.2.1:5000")
		req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}}
		s, err := r.Resolve(req, q)
		if err != nil {
			t.Fatal(err)
		}
		return s.Kind
	}
	if k := kindOf(foreign); k != subject.ClientIP {
		t.Fatalf("a certificate of other roots: %s, want client_ip", k)
	}
	for _, c := range []struct {
		name string
		at   time.Time
		want subject.Kind
	}{
		{"while the leaf is valid", now, subject.ClientCert},
		{"again on the same connection", now.Add(time.Minute), subject.ClientCert},
		{"once the leaf has expired", leaf.NotAfter.Add(time.Second), subject.ClientIP},
	} {
		now = c.at
		if k := kindOf(leaf); k != c.want {
			t.Fatalf("%s: %s, want %s", c.name, k, c.want)
		}
	}
}

// The verdicts of closed connections go: the table holds a verdict per
// leaf certificate still in memory, and a leaf is garbage once its
// connection is.
func TestChainVerdictsGoWithTheirConnections(t *testing.T) {
	ca, caKey := certificate(t, nil, nil, "", "")
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	leaf, _ := certificate(t, ca, caKey, "", "")
	r, err := subject.NewResolver(subject.Options{ClientCAs: roots, PseudonymKeys: map[int][]byte{1: []byte(fakeSecret)}, PseudonymVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	q := subject.Query{Sources: []subject.Kind{subject.ClientCert}, OperationID: "op"}
	const connections = 50
	for range connections {
		// Each handshake parses the chain anew: a leaf of its own.
		c, _ := x509.ParseCertificate(leaf.Raw)
		req := request("192.0.2.1:5000")
		req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}}
		if s, err := r.Resolve(req, q); err != nil || s.Kind != subject.ClientCert {
			t.Fatalf("%+v %v", s, err)
		}
	}
	if n := r.ChainVerdicts(); n != connections {
		t.Fatalf("%d verdicts held, want %d", n, connections)
	}
	for deadline := time.Now().Add(10 * time.Second); r.ChainVerdicts() > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d verdicts still held after their leaves were collected", r.ChainVerdicts())
		}
		runtime.GC()
		runtime.Gosched()
	}
}

// A SAN with a control character identifies nobody: it could smuggle a
// header line into the request the upstream gets.
func TestASANWithAControlCharacterIsNoIdentity(t *testing.T) {
	ca, caKey := certificate(t, nil, nil, "", "")
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	leaf, _ := certificate(t, ca, caKey, "", "orders.internal\r\nX-Admin: yes")
	r, err := subject.NewResolver(subject.Options{ClientCAs: roots, PseudonymKeys: map[int][]byte{1: []byte(fakeSecret)}, PseudonymVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	req := request("192.0.2.1:5000")
	req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
	in := r.Inbound(req)
	if id, ok := in.ClientCert(subject.DNSSAN); ok {
		t.Fatalf("dns_san %q", id)
	}
	if _, ok := in.ClientCert(subject.SPKI); !ok {
		t.Fatal("the verified certificate has no spki identity")
	}
}

// The streams of one HTTP/2 connection resolve at once: every one is the
// connection's subject, and the connection holds one verdict.
func TestAConnectionsConcurrentRequestsShareOneVerdict(t *testing.T) {
	ca, caKey := certificate(t, nil, nil, "", "")
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	leaf, _ := certificate(t, ca, caKey, "", "")
	r, err := subject.NewResolver(subject.Options{ClientCAs: roots, PseudonymKeys: map[int][]byte{1: []byte(fakeSecret)}, PseudonymVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	state := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
	q := subject.Query{Sources: []subject.Kind{subject.ClientCert}, OperationID: "op"}
	var wg sync.WaitGroup
	pseudonyms := make([]string, 16)
	for i := range pseudonyms {
		wg.Go(func() {
			req := request("192.0.2.1:5000")
			req.TLS = state
			if s, err := r.Resolve(req, q); err == nil {
				pseudonyms[i] = s.Pseudonym
			}
		})
	}
	wg.Wait()
	for _, p := range pseudonyms {
		if p == "" || p != pseudonyms[0] {
			t.Fatalf("pseudonyms %q", pseudonyms)
		}
	}
	if n := r.ChainVerdicts(); n != 1 {
		t.Fatalf("%d verdicts for one connection", n)
	}
}
