package proxy_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/quic-go/quic-go/http3"

	"github.com/edgegate/gateway/edge"
	"github.com/edgegate/gateway/proxy"
)

// A client that resets its HTTP/2 or HTTP/3 stream while the upstream is
// still thinking never got a response: the request is logged and counted
// as its abort (499, aborted), not as the 200 nobody sent.
func TestAStreamResetBeforeTheHeadIsTheClientsAbort(t *testing.T) {
	arrived := make(chan struct{}, 4)
	up := newUpstream(t)
	up.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done() // the gateway gives up on it when its client does
	})
	m := proxy.NewMetrics(prometheus.NewRegistry())
	g := newGateway(t, setup{routes: []proxy.Route{route("slow", "/", up, t, nil)}, metrics: m})
	s, pool := serveTLSEdge(t, g.handler)

	h2 := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{ServerName: "localhost", RootCAs: pool}, ForceAttemptHTTP2: true}}
	h3 := &http.Client{Transport: &http3.Transport{TLSClientConfig: &tls.Config{ServerName: "localhost", RootCAs: pool}}}
	t.Cleanup(func() { h3.Transport.(*http3.Transport).Close() })
	cases := []struct {
		proto  string
		client *http.Client
		url    string
	}{
		{"HTTP/2.0", h2, "https://" + s.HTTPSAddr().String() + "/h2"},
		{"HTTP/3.0", h3, "https://" + s.HTTP3Addr().String() + "/h3"},
	}
	for n, c := range cases {
		t.Run(c.proto, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
				res, err := c.client.Do(req)
				if err == nil {
					res.Body.Close()
				}
				done <- err
			}()
			select {
			case <-arrived:
			case err := <-done:
				t.Fatalf("the request ended before it reached the upstream: %v", err)
			case <-time.After(10 * time.Second):
				t.Fatal("the request never reached the upstream")
			}
			cancel() // the client resets its stream
			<-done
			line := waitForLine(t, g.logs, `"route":"slow"`, n+1)
			if !strings.Contains(line, `"status":499`) || !strings.Contains(line, `"aborted":true`) {
				t.Fatalf("logged as %s, want status 499 and aborted", line)
			}
			if got := testutil.ToFloat64(m.Requests.WithLabelValues("slow", "unlimited", "499", "none")); got != float64(n+1) {
				t.Fatalf("%v requests counted 499, want %d", got, n+1)
			}
			if got := testutil.ToFloat64(m.Requests.WithLabelValues("slow", "unlimited", "200", "none")); got != 0 {
				t.Fatalf("%v requests counted 200", got)
			}
		})
	}
}

// On a cost_header route the exchange with the upstream goes on after a
// client resets its stream, to read the cost: the head that comes then is
// charged by, but the request is still logged and counted as the client's
// abort, not as the head's 200.
func TestAStreamResetBeforeTheHeadOfACostHeaderRouteIsTheClientsAbort(t *testing.T) {
	arrived, answer := make(chan struct{}, 1), make(chan struct{})
	var first atomic.Bool
	up, _ := answering(t, func(w http.ResponseWriter, r *http.Request) {
		if first.CompareAndSwap(false, true) {
			arrived <- struct{}{}
			<-answer
		}
		w.Header().Set("X-Usage-Cost", "3")
		io.WriteString(w, "ok")
	})
	rt, pool := trailerRoute(up, time.Minute)
	g := newGateway(t, setup{routes: []proxy.Route{rt}, pools: []proxy.Pool{pool}})
	// The upstream answers once the gateway has seen the reset.
	var once atomic.Bool
	s, roots := serveTLSEdge(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if once.CompareAndSwap(false, true) {
			context.AfterFunc(r.Context(), func() { close(answer) })
		}
		g.handler.ServeHTTP(w, r)
	}))
	h2 := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{ServerName: "localhost", RootCAs: roots}, ForceAttemptHTTP2: true}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+s.HTTPSAddr().String()+"/stream", nil)
		res, err := h2.Do(req)
		if err == nil {
			res.Body.Close()
		}
		done <- err
	}()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the upstream")
	}
	cancel() // the client resets its stream before any head
	<-done
	line := waitForLine(t, g.logs, `"msg":"request"`, 1)
	if !strings.Contains(line, `"status":499`) || !strings.Contains(line, `"aborted":true`) {
		t.Fatalf("a stream reset before the head logged as %s, want status 499 and aborted", line)
	}
	res := g.get(t, "/stream")
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if r := remaining(t, res, "usage"); r != 96 {
		t.Fatalf("r=%d, want 96: the reset request charged the 3 its upstream said, 1 reserved", r)
	}
}

// waitForLine waits until logs hold n lines with want and returns the nth.
func waitForLine(t *testing.T, logs *syncBuffer, want string, n int) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var found []string
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, want) {
				found = append(found, line)
			}
		}
		if len(found) >= n {
			return found[n-1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d lines with %s in %s", len(found), want, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// serveTLSEdge serves h over HTTPS (HTTP/1.1 and HTTP/2) and HTTP/3 on
// loopback, as the gateway does, with a certificate for localhost, and
// returns the servers and the pool that trusts the certificate.
func serveTLSEdge(t *testing.T, h http.Handler) (*edge.Servers, *x509.CertPool) {
	t.Helper()
	files, pool := localhostCertificate(t)
	s, err := edge.Listen(edge.Options{HTTPS: "127.0.0.1:0", HTTP3: true,
		TLS: &edge.TLSOptions{Certificates: []edge.CertificateFiles{files}}}, h, http.NotFoundHandler())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	s.Serve()
	return s, pool
}

// localhostCertificate writes a self-signed certificate for localhost and
// its key to files.
func localhostCertificate(t *testing.T) (edge.CertificateFiles, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := edge.CertificateFiles{CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	if err := os.WriteFile(files.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return files, pool
}
