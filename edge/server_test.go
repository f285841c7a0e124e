package edge_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgegate/gateway/edge"
)

// testCertificate is a self-signed certificate for localhost and 127.0.0.1,
// written as PEM files; it is its own root.
type testCertificate struct {
	files edge.CertificateFiles
	leaf  *x509.Certificate
}

func newCertificate(t testing.TB) testCertificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "localhost"},
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := edge.CertificateFiles{CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	writePEM(t, files.CertFile, "CERTIFICATE", der)
	writePEM(t, files.KeyFile, "PRIVATE KEY", keyDER)
	return testCertificate{files: files, leaf: leaf}
}

func writePEM(t testing.TB, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func roots(certs ...testCertificate) *x509.CertPool {
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c.leaf)
	}
	return pool
}

// freeAddr is a loopback address with a port nobody listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func assertFree(t *testing.T, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("%s is still bound: %v", addr, err)
	}
	ln.Close()
}

// serve starts servers and closes them when the test ends.
func serve(t *testing.T, opts edge.Options, public, admin http.Handler) (*edge.Servers, <-chan error) {
	t.Helper()
	s, err := edge.Listen(opts, public, admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, s.Serve()
}

func portOf(a net.Addr) int { return a.(*net.TCPAddr).Port }

// edgeGoroutines are the stacks of goroutines running or started by package
// edge.
func edgeGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "gateway/edge.") {
			found = append(found, g)
		}
	}
	return found
}

// assertNoEdgeGoroutines polls briefly: a goroutine that has signalled its
// end may still be returning.
func assertNoEdgeGoroutines(t *testing.T) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if left = edgeGoroutines(); len(left) == 0 {
			return
		}
	}
	t.Fatalf("goroutines of package edge still running:\n%s", strings.Join(left, "\n\n"))
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })

func TestListenRefusesAndLeavesNothingBound(t *testing.T) {
	cert := newCertificate(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	missing := filepath.Join(t.TempDir(), "missing.pem")
	cases := []struct {
		name     string
		opts     func(httpAddr, httpsAddr string) edge.Options
		noPublic bool
		// busyHTTPS: the HTTPS address is taken, so only the HTTP one is
		// checked afterwards.
		busyHTTPS bool
	}{
		{name: "HTTPS without TLS", opts: func(h, s string) edge.Options {
			return edge.Options{HTTP: h, HTTPS: s}
		}},
		{name: "TLS without HTTPS", opts: func(h, s string) edge.Options {
			return edge.Options{HTTP: h, TLS: &edge.TLSOptions{Certificates: []edge.CertificateFiles{cert.files}}}
		}},
		{name: "TLS with neither certificates nor ACME", opts: func(h, s string) edge.Options {
			return edge.Options{HTTP: h, HTTPS: s, TLS: &edge.TLSOptions{}}
		}},
		{name: "ACME with an unknown challenge", opts: func(h, s string) edge.Options {
			return edge.Options{HTTP: h, HTTPS: s, TLS: &edge.TLSOptions{ACME: &edge.ACMEOptions{
				Domains: []string{"localhost"}, Storage: t.TempDir(), Challenges: []string{"dns-01"}}}}
		}},
		{name: "ACME with only http-01 and no HTTP listener", opts: func(h, s string) edge.Options {
			return edge.Options{HTTPS: s, TLS: &edge.TLSOptions{ACME: &edge.ACMEOptions{
				Domains: []string{"localhost"}, Storage: t.TempDir(), Challenges: []string{edge.ChallengeHTTP01}}}}
		}},
		{name: "a certificate file that does not exist", opts: func(h, s string) edge.Options {
			return edge.Options{HTTP: h, HTTPS: s, TLS: &edge.TLSOptions{Certificates: []edge.CertificateFiles{
				cert.files, {CertFile: missing, KeyFile: cert.files.KeyFile}}}}
		}},
		{name: "public listeners without a handler", noPublic: true, opts: func(h, s string) edge.Options {
			return edge.Options{HTTP: h}
		}},
		{name: "a negative idle timeout and an IPv6 client prefix past 128 bits", opts: func(h, s string) edge.Options {
			return edge.Options{HTTP: h, IdleTimeout: -time.Second, ClientIPv6Prefix: 129}
		}},
		{name: "an admin listener without a handler", opts: func(h, s string) edge.Options {
			return edge.Options{HTTP: h, Admin: freeAddr(t)}
		}},
		{name: "an HTTPS address already in use, after the HTTP one was bound", busyHTTPS: true, opts: func(h, s string) edge.Options {
			return edge.Options{HTTP: h, HTTPS: busy.Addr().String(), TLS: &edge.TLSOptions{Certificates: []edge.CertificateFiles{cert.files}}}
		}},
		{name: "an ACME CA root that does not exist, after both listeners were bound", opts: func(h, s string) edge.Options {
			return edge.Options{HTTP: h, HTTPS: s, TLS: &edge.TLSOptions{ACME: &edge.ACMEOptions{
				Domains: []string{"localhost"}, Storage: t.TempDir(), CARoot: missing}}}
		}},
	}
	for _, c := range cases {
		t.Run("Listen refuses "+c.name, func(t *testing.T) {
			httpAddr, httpsAddr := freeAddr(t), freeAddr(t)
			public := http.Handler(okHandler)
			if c.noPublic {
				public = nil
			}
			s, err := edge.Listen(c.opts(httpAddr, httpsAddr), public, nil)
			if err == nil {
				s.Close()
				t.Fatal("Listen accepted the options")
			}
			t.Log(err)
			if c.busyHTTPS && !errors.Is(err, syscall.EADDRINUSE) {
				t.Fatalf("error %v, want EADDRINUSE", err)
			}
			assertFree(t, httpAddr)
			if !c.busyHTTPS {
				assertFree(t, httpsAddr)
			}
		})
	}
}

func TestConflictingFramingNeverReachesTheHandler(t *testing.T) {
	cert := newCertificate(t)
	var reached atomic.Int64
	public := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		io.Copy(io.Discard, r.Body)
	})
	s, _ := serve(t, edge.Options{HTTP: "127.0.0.1:0", HTTPS: "127.0.0.1:0",
		TLS: &edge.TLSOptions{Certificates: []edge.CertificateFiles{cert.files}}}, public, nil)

	dial := map[string]func() (net.Conn, error){
		"on the plain listener": func() (net.Conn, error) { return net.Dial("tcp", s.HTTPAddr().String()) },
		"on the HTTPS listener over HTTP/1.1": func() (net.Conn, error) {
			return tls.Dial("tcp", s.HTTPSAddr().String(), &tls.Config{RootCAs: roots(cert), ServerName: "localhost", NextProtos: []string{"http/1.1"}})
		},
	}
	for name, dial := range dial {
		t.Run("a request with both Content-Length and Transfer-Encoding gets 400 "+name, func(t *testing.T) {
			before := reached.Load()
			c, err := dial()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, "POST /orders HTTP/1.1\r\nHost: localhost\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusBadRequest || res.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("status %d, Content-Type %q; want 400 application/problem+json", res.StatusCode, res.Header.Get("Content-Type"))
			}
			if n := reached.Load() - before; n != 0 {
				t.Fatalf("the handler saw %d requests", n)
			}
		})
	}
	t.Run("a request with Content-Length only reaches the handler", func(t *testing.T) {
		before := reached.Load()
		res, err := http.Post("http://"+s.HTTPAddr().String()+"/orders", "text/plain", strings.NewReader("abc"))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK || reached.Load()-before != 1 {
			t.Fatalf("status %d, handler saw %d requests; want 200 and 1", res.StatusCode, reached.Load()-before)
		}
	})
}

func TestRedirectHSTSAndHTTP2(t *testing.T) {
	cert := newCertificate(t)
	var plainReached atomic.Int64
	public := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			plainReached.Add(1)
			io.WriteString(w, "no TLS state")
			return
		}
		io.WriteString(w, "TLS state")
	})
	s, _ := serve(t, edge.Options{HTTP: "127.0.0.1:0", HTTPS: "127.0.0.1:0", TLS: &edge.TLSOptions{
		RedirectHTTP: true, HSTSMaxAge: time.Hour, HSTSIncludeSubdomains: true,
		Certificates: []edge.CertificateFiles{cert.files},
	}}, public, nil)
	httpsURL := "https://localhost:" + fmt.Sprint(portOf(s.HTTPSAddr())) + "/orders?id=1"
	dialLoopback := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, s.HTTPSAddr().String())
	}

	t.Run("plain HTTP answers 308 to the same URL on the HTTPS port", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+s.HTTPAddr().String()+"/orders?id=1", strings.NewReader("abc"))
		req.Host = "localhost:" + fmt.Sprint(portOf(s.HTTPAddr()))
		noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		res, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusPermanentRedirect || res.Header.Get("Location") != httpsURL {
			t.Fatalf("status %d, Location %q; want 308 %s", res.StatusCode, res.Header.Get("Location"), httpsURL)
		}
		if plainReached.Load() != 0 {
			t.Fatal("a plain-HTTP request reached the handler")
		}
	})

	for _, c := range []struct {
		name      string
		transport *http.Transport
		major     int
	}{
		{"HTTPS negotiates HTTP/2 and adds Strict-Transport-Security", &http.Transport{ForceAttemptHTTP2: true}, 2},
		// An empty TLSNextProto keeps the client on HTTP/1.1, the path the
		// framing listener decrypts itself.
		{"HTTP/1.1 over TLS adds Strict-Transport-Security and keeps its TLS state",
			&http.Transport{TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.transport.TLSClientConfig = &tls.Config{RootCAs: roots(cert)}
			c.transport.DialContext = dialLoopback
			defer c.transport.CloseIdleConnections()
			res, err := (&http.Client{Transport: c.transport}).Get(httpsURL)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.ProtoMajor != c.major {
				t.Fatalf("protocol %s, want HTTP/%d", res.Proto, c.major)
			}
			if got := res.Header.Get("Strict-Transport-Security"); got != "max-age=3600; includeSubDomains" {
				t.Fatalf("Strict-Transport-Security %q", got)
			}
			if string(body) != "TLS state" {
				t.Fatalf("the handler answered %q", body)
			}
		})
	}
}

// servedSerial is the serial of the certificate a new handshake gets.
func servedSerial(t *testing.T, addr net.Addr, pool *x509.CertPool) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr.String(), &tls.Config{RootCAs: pool, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

func TestSwapCertificates(t *testing.T) {
	old, next := newCertificate(t), newCertificate(t)
	pool := roots(old, next)
	s, _ := serve(t, edge.Options{HTTPS: "127.0.0.1:0", TLS: &edge.TLSOptions{Certificates: []edge.CertificateFiles{old.files}}}, okHandler, nil)

	t.Run("a set with a missing file is refused and the old certificate stays", func(t *testing.T) {
		err := s.SwapCertificates([]edge.CertificateFiles{next.files, {CertFile: filepath.Join(t.TempDir(), "gone.pem"), KeyFile: next.files.KeyFile}})
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("error %v, want one for the missing file", err)
		}
		if got := servedSerial(t, s.HTTPSAddr(), pool); got != old.leaf.SerialNumber.String() {
			t.Fatalf("served serial %s, want the old %s", got, old.leaf.SerialNumber)
		}
	})
	t.Run("a good set is served from the next handshake on", func(t *testing.T) {
		if err := s.SwapCertificates([]edge.CertificateFiles{next.files}); err != nil {
			t.Fatal(err)
		}
		if got := servedSerial(t, s.HTTPSAddr(), pool); got != next.leaf.SerialNumber.String() {
			t.Fatalf("served serial %s, want the new %s", got, next.leaf.SerialNumber)
		}
	})
	t.Run("without TLS it does nothing", func(t *testing.T) {
		plain, _ := serve(t, edge.Options{HTTP: "127.0.0.1:0"}, okHandler, nil)
		if err := plain.SwapCertificates([]edge.CertificateFiles{{CertFile: "gone.pem", KeyFile: "gone.pem"}}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestShutdown(t *testing.T) {
	t.Run("waits for a request in flight, then every port is free and every goroutine ended", func(t *testing.T) {
		cert := newCertificate(t)
		entered, release := make(chan struct{}), make(chan struct{})
		public := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(entered)
			<-release
			io.WriteString(w, "finished")
		})
		admin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
		s, failures := serve(t, edge.Options{HTTP: "127.0.0.1:0", HTTPS: "127.0.0.1:0", Admin: "127.0.0.1:0",
			TLS: &edge.TLSOptions{Certificates: []edge.CertificateFiles{cert.files}}}, public, admin)
		addrs := []string{s.HTTPAddr().String(), s.HTTPSAddr().String(), s.AdminAddr().String()}

		type result struct {
			body string
			err  error
		}
		answered := make(chan result, 1)
		go func() {
			res, err := http.Get("http://" + addrs[0] + "/slow")
			if err != nil {
				answered <- result{err: err}
				return
			}
			body, err := io.ReadAll(res.Body)
			res.Body.Close()
			answered <- result{string(body), err}
		}()
		<-entered
		shutdown := make(chan error, 1)
		go func() { shutdown <- s.Shutdown() }()
		// Once the listener refuses, Shutdown is under way.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			c, err := net.Dial("tcp", addrs[0])
			if err != nil {
				break
			}
			c.Close()
			if time.Now().After(deadline) {
				t.Fatal("the HTTP listener still accepts during Shutdown")
			}
		}
		select {
		case err := <-shutdown:
			t.Fatalf("Shutdown returned %v with a request in flight", err)
		default:
		}
		close(release)
		if r := <-answered; r.err != nil || r.body != "finished" {
			t.Fatalf("the request in flight got %q, %v", r.body, r.err)
		}
		if err := <-shutdown; err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		for _, a := range addrs {
			assertFree(t, a)
		}
		assertNoEdgeGoroutines(t)
		select {
		case err := <-failures:
			t.Fatalf("Shutdown reported as a listener failure: %v", err)
		default:
		}
	})

	t.Run("closes the request left past the timeout and says so", func(t *testing.T) {
		entered, release := make(chan struct{}), make(chan struct{})
		t.Cleanup(func() { close(release) })
		public := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(entered)
			<-release
		})
		s, _ := serve(t, edge.Options{HTTP: "127.0.0.1:0", ShutdownTimeout: 50 * time.Millisecond}, public, nil)
		answered := make(chan error, 1)
		go func() {
			res, err := http.Get("http://" + s.HTTPAddr().String() + "/stuck")
			if err == nil {
				_, err = io.ReadAll(res.Body)
				res.Body.Close()
			}
			answered <- err
		}()
		<-entered
		if err := s.Shutdown(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown: %v, want the drain deadline", err)
		}
		if err := <-answered; err == nil {
			t.Fatal("the stuck request was answered")
		}
		assertFree(t, s.HTTPAddr().String())
	})

	t.Run("abandons an ACME issuance under way", func(t *testing.T) {
		// The CA accepts connections and never answers, so the issuance is
		// under way until Shutdown cancels it.
		ca, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ca.Close()
		contacted := make(chan struct{})
		go func() {
			var held []net.Conn
			defer func() {
				for _, c := range held {
					c.Close()
				}
			}()
			for {
				c, err := ca.Accept()
				if err != nil {
					return
				}
				if held = append(held, c); len(held) == 1 {
					close(contacted)
				}
			}
		}()
		s, _ := serve(t, edge.Options{HTTP: "127.0.0.1:0", HTTPS: "127.0.0.1:0", TLS: &edge.TLSOptions{ACME: &edge.ACMEOptions{
			Domains: []string{"localhost"}, Email: "ops@example.test", CA: "https://" + ca.Addr().String() + "/directory", Storage: t.TempDir(),
		}}}, okHandler, nil)
		select {
		case <-contacted:
		case <-time.After(30 * time.Second):
			t.Fatal("the ACME work never contacted the CA")
		}
		done := make(chan error, 1)
		go func() { done <- s.Shutdown() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Shutdown did not end the ACME work")
		}
		assertNoEdgeGoroutines(t)
	})

	t.Run("after Listen alone frees every port", func(t *testing.T) {
		s, err := edge.Listen(edge.Options{HTTP: "127.0.0.1:0", Admin: "127.0.0.1:0"}, okHandler, okHandler)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Shutdown(); err != nil {
			t.Fatal(err)
		}
		assertFree(t, s.HTTPAddr().String())
		assertFree(t, s.AdminAddr().String())
	})
}

func TestConnectionCap(t *testing.T) {
	s, _ := serve(t, edge.Options{HTTP: "127.0.0.1:0", MaxConnections: 1}, okHandler, nil)
	first, err := net.Dial("tcp", s.HTTPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	// The first connection is served, so it holds the only slot.
	io.WriteString(first, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	if res, err := http.ReadResponse(bufio.NewReader(first), nil); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("first connection: %v", err)
	}
	second, err := net.Dial("tcp", s.HTTPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	io.WriteString(second, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	reader := bufio.NewReader(second)
	second.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := reader.Peek(1); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the second connection was served while the first was open: %v", err)
	}
	first.Close()
	second.SetReadDeadline(time.Now().Add(5 * time.Second))
	if res, err := http.ReadResponse(reader, nil); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("second connection after the first closed: %v", err)
	}
}

func TestAddresses(t *testing.T) {
	admin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "admin") })
	s, _ := serve(t, edge.Options{HTTP: "127.0.0.1:0", Admin: "127.0.0.1:0"}, okHandler, admin)
	if s.HTTPSAddr() != nil {
		t.Fatalf("HTTPSAddr %v without an HTTPS listener", s.HTTPSAddr())
	}
	for addr, want := range map[net.Addr]string{s.HTTPAddr(): "ok", s.AdminAddr(): "admin"} {
		res, err := http.Get("http://" + addr.String() + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if string(body) != want {
			t.Fatalf("%s answered %q, want %q", addr, body, want)
		}
	}
}
