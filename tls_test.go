package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// testCA signs leaf certificates for the TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gateway test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

var serials atomic.Int64

// leaf writes a certificate for name and its key into dir.
func (ca *testCA) leaf(t *testing.T, dir, name string) (certFile, keyFile string, serial int64) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial = 100 + serials.Add(1)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, fmt.Sprintf("%s-%d.pem", name, serial)), filepath.Join(dir, fmt.Sprintf("%s-%d.key", name, serial))
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return certFile, keyFile, serial
}

func writeTLSConfig(t *testing.T, path, upstream string, certs [][2]string) {
	var blocks strings.Builder
	for _, c := range certs {
		fmt.Fprintf(&blocks, "  certificate {\n    cert_file = %q\n    key_file  = %q\n  }\n", c[0], c[1])
	}
	src := fmt.Sprintf(`
listen {
  http                = "127.0.0.1:0"
  https               = "127.0.0.1:0"
  admin               = "127.0.0.1:0"
  # It bounds the TLS handshake too: at 300ms a busy machine's handshakes
  # were cut (connection reset).
  read_header_timeout = "2s"
  max_header_bytes    = 4096
  max_body_bytes      = 1000
}
tls {
  redirect_http = true
  hsts_max_age  = "8760h"
%s}
policy "p" {
  algorithm = "fixed-window"
  limit     = 1000
  window    = "1m"
}
route "orders" {
  path     = "/orders"
  upstream = %q
  policy   = "p"
}
`, blocks.String(), upstream)
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}

func handshake(t *testing.T, addr, name string, pool *x509.CertPool, maxVersion uint16) (*tls.Conn, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return tls.DialWithDialer(d, "tcp", addr, &tls.Config{ServerName: name, RootCAs: pool, MaxVersion: maxVersion, NextProtos: []string{"h2", "http/1.1"}})
}

func TestTLSWithStaticCertificates(t *testing.T) {
	var upstreamHits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Only a request whose whole body arrived counts as reaching us.
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		upstreamHits.Add(1)
		io.WriteString(w, r.Header.Get("X-Forwarded-Proto"))
	}))
	defer up.Close()
	ca := newTestCA(t)
	dir := t.TempDir()
	aCert, aKey, aSerial := ca.leaf(t, dir, "a.test")
	bCert, bKey, bSerial := ca.leaf(t, dir, "b.test")
	path := filepath.Join(dir, "gateway.hcl")
	writeTLSConfig(t, path, up.URL, [][2]string{{aCert, aKey}, {bCert, bKey}})
	r := startFile(t, path)
	httpsAddr := r.servers.HTTPSAddr().String()

	t.Run("the certificate is chosen by SNI", func(t *testing.T) {
		for name, serial := range map[string]int64{"a.test": aSerial, "b.test": bSerial} {
			c, err := handshake(t, httpsAddr, name, ca.pool, 0)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got := c.ConnectionState().PeerCertificates[0].SerialNumber.Int64(); got != serial {
				t.Fatalf("%s: serial %d, want %d", name, got, serial)
			}
			if c.ConnectionState().NegotiatedProtocol != "h2" {
				t.Fatalf("%s: ALPN %q, want h2", name, c.ConnectionState().NegotiatedProtocol)
			}
			c.Close()
		}
	})
	t.Run("TLS 1.2 offers AEAD suites only", func(t *testing.T) {
		cbc := []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA,
			tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA}
		if c, err := tls.Dial("tcp", httpsAddr, &tls.Config{ServerName: "a.test", RootCAs: ca.pool, MaxVersion: tls.VersionTLS12, CipherSuites: cbc}); err == nil {
			c.Close()
			t.Fatalf("a CBC-only TLS 1.2 client was served %s", tls.CipherSuiteName(c.ConnectionState().CipherSuite))
		}
		c, err := tls.Dial("tcp", httpsAddr, &tls.Config{ServerName: "a.test", RootCAs: ca.pool, MaxVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if name := tls.CipherSuiteName(c.ConnectionState().CipherSuite); !strings.Contains(name, "GCM") && !strings.Contains(name, "CHACHA20") {
			t.Fatalf("TLS 1.2 negotiated %s", name)
		}
	})
	t.Run("TLS 1.1 is refused", func(t *testing.T) {
		if c, err := handshake(t, httpsAddr, "a.test", ca.pool, tls.VersionTLS11); err == nil {
			c.Close()
			t.Fatal("a TLS 1.1 handshake succeeded")
		}
	})
	client := func(name string) *http.Client {
		return &http.Client{Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{ServerName: name, RootCAs: ca.pool},
			ForceAttemptHTTP2: true,
		}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	t.Run("requests are served over HTTP/2 with HSTS", func(t *testing.T) {
		res, err := client("a.test").Get("https://" + httpsAddr + "/orders")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 || res.ProtoMajor != 2 || res.Header.Get("Strict-Transport-Security") != "max-age=31536000" {
			t.Fatalf("%d %s HSTS=%q", res.StatusCode, res.Proto, res.Header.Get("Strict-Transport-Security"))
		}
	})
	t.Run("plain HTTP is redirected with 308", func(t *testing.T) {
		_, port, _ := net.SplitHostPort(httpsAddr)
		res, err := client("a.test").Get("http://" + r.servers.HTTPAddr().String() + "/orders?page=2")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		want := "https://127.0.0.1:" + port + "/orders?page=2"
		if res.StatusCode != 308 || res.Header.Get("Location") != want {
			t.Fatalf("%d Location=%q, want 308 to %q", res.StatusCode, res.Header.Get("Location"), want)
		}
	})
	t.Run("SIGHUP swaps certificates without dropping connections", func(t *testing.T) {
		c := client("a.test")
		c.Transport.(*http.Transport).ForceAttemptHTTP2 = false
		c.Transport.(*http.Transport).TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		var local string
		get := func() {
			req, _ := http.NewRequest("GET", "https://"+httpsAddr+"/orders", nil)
			res, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Fatalf("status %d", res.StatusCode)
			}
			local = res.TLS.PeerCertificates[0].SerialNumber.String()
		}
		get()
		before := local
		newCert, newKey, newSerial := ca.leaf(t, dir, "a.test")
		writeTLSConfig(t, path, up.URL, [][2]string{{newCert, newKey}, {bCert, bKey}})
		r.reload(t, "ok")
		get() // the kept-alive connection still carries the old certificate
		if local != before {
			t.Fatalf("the open connection was replaced: serial %s, want %s", local, before)
		}
		fresh, err := handshake(t, httpsAddr, "a.test", ca.pool, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer fresh.Close()
		if got := fresh.ConnectionState().PeerCertificates[0].SerialNumber.Int64(); got != newSerial {
			t.Fatalf("a new handshake got serial %d, want the reloaded %d", got, newSerial)
		}
	})
	t.Run("a reload without a tls block keeps serving the certificates in force", func(t *testing.T) {
		src, _ := os.ReadFile(path)
		defer os.WriteFile(path, src, 0o644)
		plain := fmt.Sprintf(`
listen {
  http  = "127.0.0.1:0"
  admin = "127.0.0.1:0"
}
route "orders" {
  path     = "/orders"
  upstream = %q
}
`, up.URL)
		if err := os.WriteFile(path, []byte(plain), 0o644); err != nil {
			t.Fatal(err)
		}
		r.reload(t, "ok")
		c, err := handshake(t, httpsAddr, "a.test", ca.pool, 0)
		if err != nil {
			t.Fatalf("HTTPS after the reload: %v", err)
		}
		c.Close()
		os.WriteFile(path, src, 0o644)
		r.reload(t, "ok")
	})

	t.Run("a client that never finishes its headers is cut off", func(t *testing.T) {
		c, err := net.Dial("tcp", r.servers.HTTPAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET /orders HTTP/1.1\r\nHost: a.test\r\nX-Slow: ")
		// The server closes it at read_header_timeout (2s); the idle
		// timeout, the next one that could, is 120s away.
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		start := time.Now()
		_, err = io.ReadAll(c)
		if err != nil {
			t.Fatalf("connection not closed by the server: %v after %v", err, time.Since(start))
		}
	})
	t.Run("oversized headers get 431", func(t *testing.T) {
		c, err := tls.Dial("tcp", httpsAddr, &tls.Config{ServerName: "a.test", RootCAs: ca.pool, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /orders HTTP/1.1\r\nHost: a.test\r\nX-Big: %s\r\n\r\n", strings.Repeat("x", 8192))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || res.StatusCode != 431 {
			t.Fatalf("%v %v, want 431", res, err)
		}
	})
	t.Run("oversized bodies get 413 and do not reach the upstream", func(t *testing.T) {
		before := upstreamHits.Load()
		res, err := client("a.test").Post("https://"+httpsAddr+"/orders", "text/plain", strings.NewReader(strings.Repeat("x", 1001)))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 413 {
			t.Fatalf("declared length: %d, want 413", res.StatusCode)
		}
		// A streamed body of unknown length is cut when it runs over.
		pr, pw := io.Pipe()
		go func() { pw.Write([]byte(strings.Repeat("y", 5000))); pw.Close() }()
		res, err = client("a.test").Post("https://"+httpsAddr+"/orders", "text/plain", pr)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 413 {
			t.Fatalf("streamed body: %d, want 413", res.StatusCode)
		}
		if upstreamHits.Load() != before {
			t.Fatalf("the upstream answered %d oversized requests", upstreamHits.Load()-before)
		}
	})
	t.Run("Content-Length with Transfer-Encoding is refused over HTTP/1.1 on TLS", func(t *testing.T) {
		before := upstreamHits.Load()
		send := func(head string) (*http.Response, string) {
			c, err := tls.Dial("tcp", httpsAddr, &tls.Config{ServerName: "a.test", RootCAs: ca.pool, NextProtos: []string{"http/1.1"}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, "POST /orders HTTP/1.1\r\nHost: a.test\r\n"+head+"\r\n3\r\nabc\r\n0\r\n\r\n")
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			return res, string(b)
		}
		res, _ := send("Content-Length: 3\r\nTransfer-Encoding: chunked\r\n")
		if res.StatusCode != 400 || upstreamHits.Load() != before {
			t.Fatalf("%d, upstream saw %d", res.StatusCode, upstreamHits.Load()-before)
		}
		// A plain chunked request passes, and the upstream learns it came
		// over HTTPS although the gateway decrypted the connection itself.
		res, body := send("Transfer-Encoding: chunked\r\n")
		if res.StatusCode != 200 || body != "https" {
			t.Fatalf("%d %q, want 200 https", res.StatusCode, body)
		}
	})
}
