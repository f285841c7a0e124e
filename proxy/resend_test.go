package proxy_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgegate/gateway/proxy"
)

// closingUpstream answers every request 200 on a keep-alive connection,
// except the first request for /once, which it reads and then closes the
// connection without answering. It counts the requests it read by path.
type closingUpstream struct {
	ln   net.Listener
	mu   sync.Mutex
	seen map[string]int
}

func newClosingUpstream(t *testing.T) *closingUpstream {
	t.Helper()
	u := &closingUpstream{seen: map[string]int{}}
	u.ln = serveRaw(t, u.serve)
	return u
}

// newClosingTLSUpstream is a closingUpstream over TLS that speaks only
// HTTP/1.1; the pool's transport of g must be told to trust it.
func newClosingTLSUpstream(t *testing.T) (*closingUpstream, *x509.CertPool) {
	t.Helper()
	cert := httptest.NewTLSServer(http.NotFoundHandler())
	cert.Close()
	roots := x509.NewCertPool()
	roots.AddCert(cert.Certificate())
	cfg := &tls.Config{Certificates: cert.TLS.Certificates, NextProtos: []string{"http/1.1"}}
	u := &closingUpstream{seen: map[string]int{}}
	u.ln = serveRaw(t, func(c net.Conn) {
		tc := tls.Server(c, cfg)
		defer tc.Close()
		u.serve(tc)
	})
	return u, roots
}

func (u *closingUpstream) serve(c net.Conn) {
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		u.mu.Lock()
		u.seen[req.URL.Path]++
		first := u.seen[req.URL.Path] == 1
		u.mu.Unlock()
		if req.URL.Path == "/once" && first {
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
			return
		}
	}
}

func (u *closingUpstream) count(path string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seen[path]
}

// Go's transport sent a request again on a new
// connection when the keep-alive connection it reused closed after the
// upstream had read it: a GET, or any request carrying Idempotency-Key.
// Nothing that may have reached the upstream is sent again, whatever the
// client's headers.
func TestARequestTheUpstreamReadIsNotSentAgain(t *testing.T) {
	for _, c := range []struct {
		name, head string
		tls        bool // the upstream speaks HTTP/1.1 over TLS
		// warmBody: the warm-up request has a body, so that it leaves
		// its connection with the standard Transport, as the lean one
		// carries none
		warmBody bool
	}{
		{"a POST with a body and Idempotency-Key", "POST /once HTTP/1.1\r\nHost: gw.test\r\nContent-Length: 5\r\nIdempotency-Key: k1\r\n\r\nhello", false, true},
		{"a GET", "GET /once HTTP/1.1\r\nHost: gw.test\r\n\r\n", false, false},
		{"a POST with Idempotency-Key", "POST /once HTTP/1.1\r\nHost: gw.test\r\nContent-Length: 0\r\nIdempotency-Key: k1\r\n\r\n", false, false},
		{"a POST with X-Idempotency-Key", "POST /once HTTP/1.1\r\nHost: gw.test\r\nContent-Length: 0\r\nX-Idempotency-Key: k1\r\n\r\n", false, false},
		{"a DELETE with Idempotency-Key", "DELETE /once HTTP/1.1\r\nHost: gw.test\r\nIdempotency-Key: k1\r\n\r\n", false, false},
		{"a GET over TLS", "GET /once HTTP/1.1\r\nHost: gw.test\r\n\r\n", true, false},
		{"a POST with Idempotency-Key over TLS", "POST /once HTTP/1.1\r\nHost: gw.test\r\nContent-Length: 0\r\nIdempotency-Key: k1\r\n\r\n", true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var up *closingUpstream
			var roots *x509.CertPool
			scheme := "http"
			if c.tls {
				up, roots = newClosingTLSUpstream(t)
				scheme = "https"
			} else {
				up = newClosingUpstream(t)
			}
			g := newPoolGateway(t, proxy.Pool{Name: "p", Targets: []string{scheme + "://" + up.ln.Addr().String()}})
			if roots != nil {
				proxy.TrustUpstreams(g.handler, roots)
			}
			// A first request leaves an idle keep-alive connection to the
			// upstream, which the next request reuses.
			req, _ := http.NewRequest(http.MethodGet, g.URL+"/warm", nil)
			if c.warmBody {
				req, _ = http.NewRequest(http.MethodPost, g.URL+"/warm", strings.NewReader("hello"))
			}
			res := do(t, req)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("warm-up: status %d", res.StatusCode)
			}
			conn, err := net.Dial("tcp", g.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(conn, c.head)
			res, err = http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			if n := up.count("/once"); n != 1 {
				t.Fatalf("the upstream read the request %d times, want once (the client got %d)", n, res.StatusCode)
			}
			if res.StatusCode != http.StatusBadGateway {
				t.Errorf("status %d, want 502", res.StatusCode)
			}
			if n := g.metric("gateway_upstream_requests_total"); n != 2 {
				t.Errorf("gateway_upstream_requests_total = %v, want 2 (the warm-up and the one send)", n)
			}
			if n := g.metric("gateway_upstream_retries_total"); n != 0 {
				t.Errorf("gateway_upstream_retries_total = %v, want 0", n)
			}
		})
	}
}
