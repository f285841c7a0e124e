package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter/redistest"
)

// clientLeaf is a client certificate signed by ca: valid now unless
// expired, for client authentication, with the SANs given.
func (ca *testCA) clientLeaf(t *testing.T, expired bool, uri, dns string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(100 + serials.Add(1)), Subject: pkix.Name{CommonName: "client"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if expired {
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
	}
	if uri != "" {
		u, err := url.Parse(uri)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = []*url.URL{u}
	}
	if dns != "" {
		tmpl.DNSNames = []string{dns}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// spkiOf is the client_cert identity "spki" of c.
func spkiOf(c tls.Certificate) string {
	sum := sha256.Sum256(c.Leaf.RawSubjectPublicKeyInfo)
	return hex.EncodeToString(sum[:])
}

// writeCAFile writes the certificates of cas into path, PEM.
func writeCAFile(t *testing.T, path string, cas ...*testCA) {
	t.Helper()
	var b []byte
	for _, ca := range cas {
		b = append(b, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})...)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// mtlsGateway is an HTTPS gateway asking for client certificates under
// clientAuth: route "spki" limits each certificate's public key to two
// requests, "uri" and "dns" each URI and DNS SAN, "ip" each client
// address; each falls through to the client's address. "only" has no
// other source, and "echo" (unlimited) forwards the identity. The upstream answers with the
// X-Client-Cert values it got, joined by commas.
func mtlsGateway(t *testing.T, dir, caFile, clientAuth, upstream string) *mtlsRunning {
	t.Helper()
	server := newTestCA(t)
	certFile, keyFile, _ := server.leaf(t, dir, "a.test")
	route := func(name, identity string) string {
		return fmt.Sprintf(`
route %q {
  path                 = "/%s"
  upstream             = %q
  policy               = "two"
  subject              = ["client_cert", "client_ip"]
  client_cert_identity = %q
  client_cert_header   = "X-Client-Cert"
}
`, name, name, upstream, identity)
	}
	src := fmt.Sprintf(`
listen {
  https               = "127.0.0.1:0"
  admin               = "127.0.0.1:0"
  read_header_timeout = "5s"
  http3               = true
}
tls {
  certificate {
    cert_file = %q
    key_file  = %q
  }
  client_ca_file = %q
  client_auth    = %q
}
policy "two" {
  algorithm = "fixed-window"
  limit     = 2
  window    = "1h"
}
route "ip" {
  path     = "/ip"
  upstream = %q
  policy   = "two"
  subject  = ["client_cert", "client_ip"]
}
route "only" {
  path     = "/only"
  upstream = %q
  policy   = "two"
  subject  = ["client_cert"]
}
route "echo" {
  path               = "/echo"
  upstream           = %q
  subject            = ["client_cert"]
  client_cert_header = "X-Client-Cert"
}
%s%s%s`, certFile, keyFile, caFile, clientAuth, upstream, upstream, upstream,
		route("spki", "spki"), route("uri", "uri_san"), route("dns", "dns_san"))
	path := filepath.Join(dir, "gateway.hcl")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return &mtlsRunning{running: startFile(t, path), roots: server.pool}
}

// mtlsRunning is a gateway whose HTTPS certificate chains to roots.
type mtlsRunning struct {
	*running
	roots *x509.CertPool
}

// clientConfig presents cert, or no certificate when nil, whatever CAs
// the server names (as curl and openssl do; crypto/tls would otherwise
// send none that the server's list does not name).
func (r *mtlsRunning) clientConfig(cert *tls.Certificate) *tls.Config {
	if cert == nil {
		cert = &tls.Certificate{}
	}
	return &tls.Config{ServerName: "a.test", RootCAs: r.roots,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }}
}

// mtlsClient is a client of its own connections, presenting cert when
// not nil.
func (r *mtlsRunning) mtlsClient(cert *tls.Certificate) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: r.clientConfig(cert), ForceAttemptHTTP2: true}}
}

// call sends GET path with X-Client-Cert set to forged when not empty, and
// returns the status and the body (the upstream's X-Client-Cert values).
func (r *mtlsRunning) call(t *testing.T, c *http.Client, path, forged string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", "https://"+r.servers.HTTPSAddr().String()+path, nil)
	if forged != "" {
		req.Header.Set("X-Client-Cert", forged)
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		return res.StatusCode, ""
	}
	return res.StatusCode, string(b)
}

// statuses sends GET path once with each client in turn.
func (r *mtlsRunning) statuses(t *testing.T, path string, clients ...*http.Client) string {
	t.Helper()
	var s []string
	for _, c := range clients {
		code, _ := r.call(t, c, path, "")
		s = append(s, fmt.Sprint(code))
	}
	return strings.Join(s, " ")
}

// refusal dials the HTTPS listener with cert (or none), through cache
// when not nil, and reads: the error the server ends the connection with.
// Nothing is written, so that the server's alert is not lost to a reset.
// It is meant for clients the server refuses: one it lets in is waited
// for until the read times out.
func (r *mtlsRunning) refusal(cert *tls.Certificate, cache tls.ClientSessionCache) error {
	cfg := r.clientConfig(cert)
	cfg.NextProtos, cfg.ClientSessionCache = []string{"http/1.1"}, cache
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", r.servers.HTTPSAddr().String(), cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	// Under TLS 1.3 the client's handshake ends before the server has
	// checked its certificate: the verdict is the first read.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = c.Read(make([]byte, 1))
	return err
}

// resumes makes one request on a connection of its own through cache and
// reports whether its handshake resumed a session; the response carries
// the session ticket for the next.
func (r *mtlsRunning) resumes(t *testing.T, cert *tls.Certificate, cache tls.ClientSessionCache) bool {
	t.Helper()
	cfg := r.clientConfig(cert)
	cfg.NextProtos, cfg.ClientSessionCache = []string{"http/1.1"}, cache
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", r.servers.HTTPSAddr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /echo HTTP/1.1\r\nHost: a.test\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("%v %v", res, err)
	}
	return c.ConnectionState().DidResume
}

func TestMutualTLS(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Join(r.Header.Values("X-Client-Cert"), ","))
	}))
	defer up.Close()
	clients := newTestCA(t)
	stranger := newTestCA(t)
	certA := clients.clientLeaf(t, false, "spiffe://example.org/orders", "orders.internal")
	certB := clients.clientLeaf(t, false, "spiffe://example.org/billing", "billing.internal")
	// Another key with A's names: the same identity by SAN, another by key.
	certA2 := clients.clientLeaf(t, false, "spiffe://example.org/orders", "orders.internal")
	foreign := stranger.clientLeaf(t, false, "spiffe://example.org/orders", "orders.internal")
	expired := clients.clientLeaf(t, true, "spiffe://example.org/orders", "orders.internal")

	for _, mode := range []string{"require", "request"} {
		t.Run("under "+mode, func(t *testing.T) {
			dir := t.TempDir()
			caFile := filepath.Join(dir, "clients.pem")
			writeCAFile(t, caFile, clients)
			r := mtlsGateway(t, dir, caFile, mode, up.URL)
			a, a2, b := r.mtlsClient(&certA), r.mtlsClient(&certA2), r.mtlsClient(&certB)

			t.Run("each certificate's key has a budget of its own", func(t *testing.T) {
				if got := r.statuses(t, "/spki", a, a, a, b); got != "200 200 429 200" {
					t.Fatalf("A, A, A, B: %s, want 200 200 429 200", got)
				}
				if got := r.statuses(t, "/spki", a2); got != "200" {
					t.Fatalf("another key with A's names: %s, want 200", got)
				}
			})
			t.Run("the upstream gets the key's identity, never the client's copy", func(t *testing.T) {
				if code, got := r.call(t, a, "/echo", "forged"); code != 200 || got != spkiOf(certA) {
					t.Fatalf("%d X-Client-Cert %q, want %q", code, got, spkiOf(certA))
				}
				// Over HTTP/2 here, over HTTP/1.1 in the reload test.
				res, err := a.Get("https://" + r.servers.HTTPSAddr().String() + "/echo")
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				if res.ProtoMajor != 2 {
					t.Fatalf("the clients speak %s, want HTTP/2", res.Proto)
				}
			})
			t.Run("uri_san keys certificates by their URI", func(t *testing.T) {
				if got := r.statuses(t, "/uri", a, a2, a, b); got != "200 200 429 200" {
					t.Fatalf("A, A2, A, B: %s, want 200 200 429 200", got)
				}
				if code, got := r.call(t, b, "/uri", "forged"); code != 200 || got != "spiffe://example.org/billing" {
					t.Fatalf("%d X-Client-Cert %q", code, got)
				}
			})
			t.Run("dns_san keys certificates by their DNS name", func(t *testing.T) {
				if got := r.statuses(t, "/dns", a2, a, a, b); got != "200 200 429 200" {
					t.Fatalf("A2, A, A, B: %s, want 200 200 429 200", got)
				}
				if code, got := r.call(t, b, "/dns", ""); code != 200 || got != "billing.internal" {
					t.Fatalf("%d X-Client-Cert %q", code, got)
				}
			})
			t.Run("no identity reaches the log", func(t *testing.T) {
				logs := r.logs.String()
				for _, raw := range []string{spkiOf(certA), spkiOf(certB), "spiffe://", "orders.internal", "billing.internal"} {
					if strings.Contains(logs, raw) {
						t.Fatalf("the log holds %q:\n%s", raw, logs)
					}
				}
				if !strings.Contains(logs, `"subject_kind":"client_cert"`) {
					t.Fatalf("no request logged as client_cert:\n%s", logs)
				}
			})

			refused := []struct {
				name  string
				cert  *tls.Certificate
				alert string // what the client is told under require
			}{
				{"a certificate from another CA", &foreign, "unknown certificate authority"},
				{"an expired certificate", &expired, "expired certificate"},
				{"no certificate", nil, "certificate required"},
			}
			if mode == "require" {
				for _, c := range refused {
					t.Run(c.name+" ends the handshake", func(t *testing.T) {
						err := r.refusal(c.cert, nil)
						// crypto/tls exports no type for an alert received
						// over TCP; its text is the alert's name.
						if err == nil || !strings.Contains(err.Error(), c.alert) {
							t.Fatalf("got %v, want the alert %q", err, c.alert)
						}
					})
				}
				return
			}
			for _, c := range refused {
				t.Run(c.name+" connects, without an identity to forward", func(t *testing.T) {
					if code, got := r.call(t, r.mtlsClient(c.cert), "/echo", "forged"); code != 200 || got != "" {
						t.Fatalf("%d X-Client-Cert %q, want 200 and none", code, got)
					}
				})
			}
			t.Run("a limited route with no other source answers 401 without a certificate that verifies", func(t *testing.T) {
				for _, c := range refused {
					if code, _ := r.call(t, r.mtlsClient(c.cert), "/only", ""); code != http.StatusUnauthorized {
						t.Fatalf("%s: %d, want 401", c.name, code)
					}
				}
				if code, _ := r.call(t, a, "/only", ""); code != 200 {
					t.Fatalf("A: %d, want 200", code)
				}
			})
			t.Run("without a certificate that verifies the subject falls through to the address", func(t *testing.T) {
				// The three share the address's budget; A has its own.
				var each []*http.Client
				for _, c := range refused {
					each = append(each, r.mtlsClient(c.cert))
				}
				if got := r.statuses(t, "/ip", append(each, a)...); got != "200 200 429 200" {
					t.Fatalf("another CA's, expired, none, then A: %s, want 200 200 429 200", got)
				}
				logs := r.logs.String()
				if n := strings.Count(logs, `"route":"ip","method":"GET","subject_kind":"client_ip"`); n != 3 {
					t.Fatalf("%d requests on ip logged as client_ip, want 3:\n%s", n, logs)
				}
			})
		})
	}

	t.Run("a reload swaps the roots", func(t *testing.T) {
		dir := t.TempDir()
		caFile := filepath.Join(dir, "clients.pem")
		writeCAFile(t, caFile, clients)
		r := mtlsGateway(t, dir, caFile, "require", up.URL)
		if err := r.refusal(&foreign, nil); err == nil || !strings.Contains(err.Error(), "unknown certificate authority") {
			t.Fatalf("another CA's certificate before the reload: %v", err)
		}
		// One connection, kept open across the reload.
		kept := r.mtlsClient(&certA)
		kept.Transport.(*http.Transport).ForceAttemptHTTP2 = false
		kept.Transport.(*http.Transport).MaxConnsPerHost = 1
		if code, got := r.call(t, kept, "/echo", ""); code != 200 || got != spkiOf(certA) {
			t.Fatalf("before: %d X-Client-Cert %q", code, got)
		}
		// A session to resume after the reload.
		sessions := tls.NewLRUClientSessionCache(1)
		r.resumes(t, &certA, sessions)
		if !r.resumes(t, &certA, sessions) {
			t.Fatal("the second connection did not resume the first's session")
		}

		writeCAFile(t, caFile, stranger)
		r.reload(t, "ok")
		const restartOnly = "change on restart only"
		if strings.Contains(r.logs.String(), restartOnly) {
			t.Fatalf("new roots were taken for a change that needs a restart:\n%s", r.logs.String())
		}
		if code, got := r.call(t, r.mtlsClient(&foreign), "/echo", ""); code != 200 || got != spkiOf(foreign) {
			t.Fatalf("the new CA's certificate: %d X-Client-Cert %q", code, got)
		}
		if err := r.refusal(&certA, nil); err == nil || !strings.Contains(err.Error(), "unknown certificate authority") {
			t.Fatalf("the old CA's certificate after the reload: %v", err)
		}
		// Its session is not resumed: the handshake is a full one, and
		// refused.
		if err := r.refusal(&certA, sessions); err == nil || !strings.Contains(err.Error(), "unknown certificate authority") {
			t.Fatalf("a session of the old CA's certificate after the reload: %v", err)
		}
		// The open connection stays, but its certificate no longer
		// identifies it.
		reused := false
		req, _ := http.NewRequest("GET", "https://"+r.servers.HTTPSAddr().String()+"/echo", nil)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused },
		}))
		res, err := kept.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if !reused || res.StatusCode != 200 || len(body) != 0 {
			t.Fatalf("the kept connection (reused %v): %d X-Client-Cert %q, want 200 and none", reused, res.StatusCode, body)
		}

		t.Run("a CA file without a certificate is refused and the roots stay", func(t *testing.T) {
			os.WriteFile(caFile, []byte("not a certificate\n"), 0o644)
			r.reload(t, "error")
			if code, _ := r.call(t, r.mtlsClient(&foreign), "/echo", ""); code != 200 {
				t.Fatalf("after a refused reload: %d", code)
			}
		})
		t.Run("client_auth changes on restart only", func(t *testing.T) {
			writeCAFile(t, caFile, stranger)
			path := r.path
			src, _ := os.ReadFile(path)
			os.WriteFile(path, []byte(strings.Replace(string(src), `client_auth    = "require"`, `client_auth    = "request"`, 1)), 0o644)
			r.reload(t, "ok")
			if !strings.Contains(r.logs.String(), restartOnly) {
				t.Fatalf("no warning that client_auth changes on restart:\n%s", r.logs.String())
			}
			if err := r.refusal(nil, nil); err == nil || !strings.Contains(err.Error(), "certificate required") {
				t.Fatalf("a client without a certificate after the reload: %v", err)
			}
		})
	})
}

// Under client_auth "require" the ACME CA still validates TLS-ALPN-01 on
// the HTTPS listener: its validation connection presents no certificate.
func TestACMEByTLSALPNUnderClientCertificates(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	httpPort, httpsPort := redistest.FreePort(t), redistest.FreePort(t)
	ca := startPebble(t, httpPort, httpsPort)
	dir := t.TempDir()
	path := filepath.Join(dir, "gateway.hcl")
	writeACMEConfig(t, path, httpPort, httpsPort, "tls-alpn-01", ca.server.URL+"/dir", ca.directoryRoot(t, dir), filepath.Join(dir, "certs"), up.URL)
	clients := newTestCA(t)
	caFile := filepath.Join(dir, "clients.pem")
	writeCAFile(t, caFile, clients)
	src, _ := os.ReadFile(path)
	src = []byte(strings.Replace(string(src), "tls {\n", fmt.Sprintf("tls {\n  client_ca_file = %q\n  client_auth = \"require\"\n", caFile), 1))
	if err := os.WriteFile(path, src, 0o644); err != nil {
		t.Fatal(err)
	}
	startFile(t, path)
	cert := clients.clientLeaf(t, false, "", "")
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{ServerName: "localhost", RootCAs: ca.roots, Certificates: []tls.Certificate{cert}}}}
	var lastErr error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		res, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/orders", httpsPort))
		if err != nil {
			lastErr = err
			continue
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("status %d", res.StatusCode)
		}
		anonymous := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{ServerName: "localhost", RootCAs: ca.roots}}}
		if res, err := anonymous.Get(fmt.Sprintf("https://127.0.0.1:%d/orders", httpsPort)); err == nil {
			res.Body.Close()
			t.Fatalf("a client without a certificate got %d", res.StatusCode)
		}
		return
	}
	t.Fatalf("no certificate was issued under client_auth \"require\": %v", lastErr)
}
