package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/letsencrypt/pebble/v2/ca"
	"github.com/letsencrypt/pebble/v2/db"
	"github.com/letsencrypt/pebble/v2/va"
	"github.com/letsencrypt/pebble/v2/wfe"

	"github.com/edgegate/gateway/limiter/redistest"
)

// pebble is an in-process ACME CA. It validates challenges against the
// gateway's own listeners on loopback.
type pebble struct {
	server *httptest.Server
	roots  *x509.CertPool // the roots it issues under
	orders atomic.Int64
}

func startPebble(t *testing.T, httpPort, tlsPort int) *pebble {
	t.Setenv("PEBBLE_VA_NOSLEEP", "1")
	t.Setenv("PEBBLE_WFE_NONCEREJECT", "0")
	logger := log.New(io.Discard, "", 0)
	store := db.NewMemoryStore()
	authority := ca.New(logger, store, "", "ecdsa", 0, 1, map[string]ca.Profile{"default": {Description: "test"}})
	validator := va.New(logger, httpPort, tlsPort, false, "", store)
	frontend := wfe.New(logger, store, validator, authority, nil, false, false, 0, 0)
	p := &pebble{roots: x509.NewCertPool()}
	handler := frontend.Handler()
	p.server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/order-plz") {
			p.orders.Add(1)
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(p.server.Close)
	root := authority.GetRootCert(0)
	cert, err := x509.ParseCertificate(root.DER)
	if err != nil {
		t.Fatal(err)
	}
	p.roots.AddCert(cert)
	return p
}

// directoryRoot writes the certificate of the CA's own HTTPS endpoint, for
// ca_root.
func (p *pebble) directoryRoot(t *testing.T, dir string) string {
	path := filepath.Join(dir, "acme-directory-root.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.server.Certificate().Raw})
	if err := os.WriteFile(path, pemBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func writeACMEConfig(t *testing.T, path string, httpPort, httpsPort int, challenge, directory, caRoot, storage, upstream string) {
	src := fmt.Sprintf(`
listen {
  http  = "127.0.0.1:%d"
  https = "127.0.0.1:%d"
  http3 = true
  admin = "127.0.0.1:0"
}
tls {
  redirect_http = true
  acme {
    domains = ["localhost"]
    email   = "ops@example.test"
    ca      = %q
    ca_root = %q
    storage = %q
    challenges = [%q]
  }
}
route "orders" {
  path     = "/orders"
  upstream = %q
}
`, httpPort, httpsPort, directory, caRoot, storage, challenge, upstream)
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}

// getHTTPS waits until the gateway serves name with a certificate from
// roots, then returns the response and the leaf's serial.
func getHTTPS(t *testing.T, addr string, roots *x509.CertPool) (*http.Response, string) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{ServerName: "localhost", RootCAs: roots}}}
	var lastErr error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		res, err := client.Get("https://" + addr + "/orders")
		if err != nil {
			lastErr = err
			continue
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res, res.TLS.PeerCertificates[0].SerialNumber.String()
	}
	t.Fatalf("no HTTPS answer with an issued certificate: %v", lastErr)
	return nil, ""
}

func TestACMEIssuanceAndSharedStorage(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	httpPort, httpsPort := redistest.FreePort(t), redistest.FreePort(t)
	ca := startPebble(t, httpPort, httpsPort)
	dir := t.TempDir()
	storage := filepath.Join(dir, "certs")
	caRoot := ca.directoryRoot(t, dir)

	path := filepath.Join(dir, "gateway.hcl")
	// HTTP-01 only, with redirect_http on: the issuance proves that
	// challenges are exempt from the redirect.
	writeACMEConfig(t, path, httpPort, httpsPort, "http-01", ca.server.URL+"/dir", caRoot, storage, up.URL)
	first := startFile(t, path)
	res, serial := getHTTPS(t, first.servers.HTTPSAddr().String(), ca.roots)
	if res.StatusCode != 200 {
		t.Fatalf("status %d over HTTPS", res.StatusCode)
	}
	if n := ca.orders.Load(); n != 1 {
		t.Fatalf("%d orders, want 1", n)
	}
	t.Run("HTTP/3 serves the ACME certificate", func(t *testing.T) {
		res, err := h3Client(t, "127.0.0.1", "localhost", ca.roots).Get("https://" + first.servers.HTTPSAddr().String() + "/orders")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.ProtoMajor != 3 || res.StatusCode != 200 || res.TLS == nil || res.TLS.PeerCertificates[0].SerialNumber.String() != serial {
			t.Fatalf("%s %d, want HTTP/3 200 with the certificate of serial %s", res.Proto, res.StatusCode, serial)
		}
	})
	t.Run("plain HTTP is redirected, challenges are not", func(t *testing.T) {
		noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		res, err := noFollow.Get(fmt.Sprintf("http://127.0.0.1:%d/orders", httpPort))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 308 {
			t.Fatalf("plain HTTP: %d, want 308", res.StatusCode)
		}
	})

	// A second gateway on the same storage, on other ports, reuses the
	// certificate without a new order.
	first.stop(t, 20*time.Second)
	path2 := filepath.Join(dir, "gateway2.hcl")
	writeACMEConfig(t, path2, redistest.FreePort(t), redistest.FreePort(t), "tls-alpn-01", ca.server.URL+"/dir", caRoot, storage, up.URL)
	second := startFile(t, path2)
	_, serial2 := getHTTPS(t, second.servers.HTTPSAddr().String(), ca.roots)
	if serial2 != serial {
		t.Fatalf("second gateway serves serial %s, want the stored %s", serial2, serial)
	}
	if n := ca.orders.Load(); n != 1 {
		t.Fatalf("%d orders after the second gateway started, want still 1", n)
	}
}

func TestACMEIssuanceByTLSALPN(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	httpPort, httpsPort := redistest.FreePort(t), redistest.FreePort(t)
	ca := startPebble(t, httpPort, httpsPort)
	dir := t.TempDir()
	path := filepath.Join(dir, "gateway.hcl")
	writeACMEConfig(t, path, httpPort, httpsPort, "tls-alpn-01", ca.server.URL+"/dir", ca.directoryRoot(t, dir), filepath.Join(dir, "certs"), up.URL)
	startFile(t, path)
	if res, _ := getHTTPS(t, fmt.Sprintf("127.0.0.1:%d", httpsPort), ca.roots); res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
}
