package edge_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/qlog"
	"github.com/quic-go/quic-go/qlogwriter"

	"github.com/edgegate/gateway/edge"
)

// serveHTTP3 serves public over HTTPS and HTTP/3 on loopback with opts
// (listeners and TLS filled in here) and returns the servers and the pool
// that trusts their certificate.
func serveHTTP3(t *testing.T, opts edge.Options, public http.Handler) (*edge.Servers, *x509.CertPool) {
	t.Helper()
	s, pool := listenHTTP3(t, opts, public)
	s.Serve()
	return s, pool
}

// listenHTTP3 is serveHTTP3 before Serve.
func listenHTTP3(t *testing.T, opts edge.Options, public http.Handler) (*edge.Servers, *x509.CertPool) {
	t.Helper()
	cert := newCertificate(t)
	opts.HTTPS, opts.HTTP3 = "127.0.0.1:0", true
	opts.TLS = &edge.TLSOptions{Certificates: []edge.CertificateFiles{cert.files}}
	s, err := edge.Listen(opts, public, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, roots(cert)
}

// quicClient dials QUIC connections that offer h3 from local, a loopback
// address of its own, so that one test plays several clients.
type quicClient struct {
	tr  *quic.Transport
	tls *tls.Config
}

func newQUICClient(t testing.TB, local string, pool *x509.CertPool) *quicClient {
	t.Helper()
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(local)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	t.Cleanup(func() {
		tr.Close()
		udp.Close()
	})
	return &quicClient{tr: tr, tls: &tls.Config{ServerName: "localhost", RootCAs: pool, NextProtos: []string{http3.NextProtoH3}}}
}

// dial completes a handshake with addr, or fails within a few seconds.
func (c *quicClient) dial(addr net.Addr, conf *quic.Config) (*quic.Conn, error) {
	if conf == nil {
		conf = &quic.Config{}
	}
	conf.HandshakeIdleTimeout = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The connection ends with the client's transport, if not before.
	return c.tr.Dial(ctx, addr, c.tls, conf)
}

// burst starts n handshakes with addr at once and returns how many
// completed.
func (c *quicClient) burst(addr net.Addr, n int) int {
	var completed atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if _, err := c.dial(addr, nil); err == nil {
				completed.Add(1)
			}
		})
	}
	wg.Wait()
	return int(completed.Load())
}

// served reports whether a connection of c to addr serves GET /.
func (c *quicClient) served(addr net.Addr) bool {
	conn, err := c.dial(addr, nil)
	if err != nil {
		return false
	}
	code, _, err := h3Get(conn)
	return err == nil && code == 200
}

// get sends GET / over conn and returns the status and body.
func h3Get(conn *quic.Conn) (int, string, error) {
	req, _ := http.NewRequest(http.MethodGet, "https://localhost/", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := (&http3.Transport{}).NewClientConn(conn).RoundTrip(req.WithContext(ctx))
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return res.StatusCode, string(body), err
}

// refused reports whether a connection attempt of c to addr ended without
// a connection it could use: refused during the handshake, or closed just
// after it.
func (c *quicClient) refused(addr net.Addr) bool {
	conn, err := c.dial(addr, nil)
	if err != nil {
		return true
	}
	select {
	case <-conn.Context().Done():
		return true
	case <-time.After(2 * time.Second):
		return false
	}
}

func TestHTTP3ServesTheHandlerWithItsCaps(t *testing.T) {
	t.Run("a request is served over HTTP/3 with the HTTPS listener's certificate", func(t *testing.T) {
		s, pool := serveHTTP3(t, edge.Options{}, okHandler)
		conn, err := newQUICClient(t, "127.0.0.1", pool).dial(s.HTTP3Addr(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if conn.ConnectionState().TLS.NegotiatedProtocol != "h3" || conn.ConnectionState().Used0RTT {
			t.Fatalf("ALPN %q, 0-RTT %v", conn.ConnectionState().TLS.NegotiatedProtocol, conn.ConnectionState().Used0RTT)
		}
		if code, body, err := h3Get(conn); err != nil || code != 200 || body != "ok" {
			t.Fatalf("%d %q %v", code, body, err)
		}
	})

	t.Run("one client holds at most max_connections_per_client QUIC connections", func(t *testing.T) {
		s, pool := serveHTTP3(t, edge.Options{MaxConnectionsPerClient: 2}, okHandler)
		addr := s.HTTP3Addr()
		greedy := newQUICClient(t, "127.0.0.2", pool)
		var held []*quic.Conn
		for range 2 {
			conn, err := greedy.dial(addr, nil)
			if err != nil {
				t.Fatal(err)
			}
			// Served: the listener has counted it.
			if code, _, err := h3Get(conn); err != nil || code != 200 {
				t.Fatalf("a connection under the cap: %d %v", code, err)
			}
			held = append(held, conn)
		}
		if !greedy.refused(addr) {
			t.Fatal("a third connection of the client was kept")
		}
		other, err := newQUICClient(t, "127.0.0.3", pool).dial(addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		if code, _, err := h3Get(other); err != nil || code != 200 {
			t.Fatalf("another client: %d %v", code, err)
		}
		// Its place comes back when one of its connections closes.
		held[0].CloseWithError(0, "")
		for deadline := time.Now().Add(5 * time.Second); ; {
			conn, err := greedy.dial(addr, nil)
			if err == nil {
				if code, _, err := h3Get(conn); err == nil && code == 200 {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatal("the client's place did not come back after it closed a connection")
			}
		}
	})

	t.Run("a client that does not finish its request headers in time has its stream reset", func(t *testing.T) {
		s, pool := serveHTTP3(t, edge.Options{ReadHeaderTimeout: 100 * time.Millisecond, IdleTimeout: time.Minute}, okHandler)
		for name, partial := range map[string][]byte{
			"the frame's type only":               {0x01},
			"a frame header and part of its body": {0x01, 0x20, 0x00, 0x00, 0xd1},
		} {
			conn, err := newQUICClient(t, "127.0.0.1", pool).dial(s.HTTP3Addr(), nil)
			if err != nil {
				t.Fatal(err)
			}
			str, err := conn.OpenStreamSync(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := str.Write(partial); err != nil {
				t.Fatal(err)
			}
			str.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err = str.Read(make([]byte, 1))
			var se *quic.StreamError
			if !errors.As(err, &se) || !se.Remote || se.ErrorCode != quic.StreamErrorCode(http3.ErrCodeRequestIncomplete) {
				t.Fatalf("%s: the stream ended with %v, want a reset with H3_REQUEST_INCOMPLETE", name, err)
			}
		}
	})

	t.Run("headers over max_header_bytes get 431", func(t *testing.T) {
		s, pool := serveHTTP3(t, edge.Options{MaxHeaderBytes: 1024}, okHandler)
		conn, err := newQUICClient(t, "127.0.0.1", pool).dial(s.HTTP3Addr(), nil)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodGet, "https://localhost/", nil)
		req.Header.Set("X-Big", strings.Repeat("a", 4096))
		res, err := (&http3.Transport{}).NewClientConn(conn).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("%d, want 431", res.StatusCode)
		}
	})
}

func TestHTTP3HandshakesInFlightAreHeldToTheCaps(t *testing.T) {
	// A handshake from an unproven address holds no place, since the
	// address may be spoofed; it only sends the next one a Retry. So the
	// work is bounded by the cap from unproven addresses plus the cap
	// from proven ones.
	for _, c := range []struct {
		name         string
		opts         edge.Options
		proveAddress bool // every Initial gets a Retry
		most         int
	}{
		{"a client's burst runs max_connections_per_client handshakes unproven and as many proven", edge.Options{MaxConnectionsPerClient: 1}, false, 2},
		{"a client's burst runs max_connections_per_client handshakes when every address is proven first", edge.Options{MaxConnectionsPerClient: 1}, true, 1},
		{"a burst runs max_connections handshakes unproven and as many proven", edge.Options{MaxConnections: 2}, false, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, pool := listenHTTP3(t, c.opts, okHandler)
			if c.proveAddress {
				edge.SetRetryAboveHandshakes(s, 0)
			}
			s.Serve()
			completed := newQUICClient(t, "127.0.0.2", pool).burst(s.HTTP3Addr(), 24)
			if completed == 0 || completed > c.most {
				t.Fatalf("%d of 24 handshakes completed, want 1 to %d", completed, c.most)
			}
		})
	}

	// A client proven first holds its place from its first packet.
	provenClient := func(t *testing.T, opts edge.Options) (*edge.Servers, *x509.CertPool) {
		opts.MaxConnectionsPerClient = 1
		s, pool := listenHTTP3(t, opts, okHandler)
		edge.SetRetryAboveHandshakes(s, 0)
		s.Serve()
		return s, pool
	}
	placeComesBack := func(t *testing.T, s *edge.Servers, pool *x509.CertPool) {
		t.Helper()
		client := newQUICClient(t, "127.0.0.2", pool)
		for deadline := time.Now().Add(5 * time.Second); !client.served(s.HTTP3Addr()); {
			if time.Now().After(deadline) {
				t.Fatal("the client's place did not come back after its handshake ended")
			}
		}
	}

	t.Run("a handshake that fails gives its client's place back", func(t *testing.T) {
		s, pool := provenClient(t, edge.Options{})
		failing := newQUICClient(t, "127.0.0.2", pool)
		failing.tls.VerifyConnection = func(tls.ConnectionState) error { return errors.New("certificate refused") }
		if _, err := failing.dial(s.HTTP3Addr(), nil); err == nil {
			t.Fatal("the handshake did not fail")
		}
		placeComesBack(t, s, pool)
	})

	t.Run("a handshake in flight holds its client's place until it times out", func(t *testing.T) {
		s, pool := provenClient(t, edge.Options{ReadHeaderTimeout: time.Second})
		stallHandshake(t, s, "127.0.0.2", pool)
		if !newQUICClient(t, "127.0.0.2", pool).refused(s.HTTP3Addr()) {
			t.Fatal("a second handshake ran beside the one holding the client's place")
		}
		placeComesBack(t, s, pool)
	})
}

// retrySeen is a client's qlog trace that notes a Retry packet taken.
type retrySeen struct{ seen atomic.Bool }

func (r *retrySeen) AddProducer() qlogwriter.Recorder { return r }
func (r *retrySeen) Close() error                     { return nil }
func (r *retrySeen) RecordEvent(e qlogwriter.Event) {
	if p, ok := e.(qlog.PacketReceived); ok && p.Header.PacketType == qlog.PacketTypeRetry {
		r.seen.Store(true)
	}
}

func (r *retrySeen) config() *quic.Config {
	return &quic.Config{Tracer: func(context.Context, bool, quic.ConnectionID) qlogwriter.Trace { return r }}
}

func TestHTTP3AddressValidation(t *testing.T) {
	t.Run("a client is not sent a Retry while few handshakes are in flight", func(t *testing.T) {
		s, pool := serveHTTP3(t, edge.Options{}, okHandler)
		var retry retrySeen
		conn, err := newQUICClient(t, "127.0.0.1", pool).dial(s.HTTP3Addr(), retry.config())
		if err != nil {
			t.Fatal(err)
		}
		if code, _, err := h3Get(conn); err != nil || code != 200 {
			t.Fatalf("%d %v", code, err)
		}
		if retry.seen.Load() {
			t.Fatal("the client was sent a Retry")
		}
	})
	t.Run("past the handshakes in flight a new client must prove its address, and is then served", func(t *testing.T) {
		cert := newCertificate(t)
		s, err := edge.Listen(edge.Options{HTTPS: "127.0.0.1:0", HTTP3: true, TLS: &edge.TLSOptions{Certificates: []edge.CertificateFiles{cert.files}}}, okHandler, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		edge.SetRetryAboveHandshakes(s, 1)
		s.Serve()
		pool := roots(cert)
		release, stalledDone := stallHandshake(t, s, "127.0.0.2", pool)
		var retry retrySeen
		conn, err := newQUICClient(t, "127.0.0.3", pool).dial(s.HTTP3Addr(), retry.config())
		if err != nil {
			t.Fatal(err)
		}
		if code, _, err := h3Get(conn); err != nil || code != 200 {
			t.Fatalf("%d %v", code, err)
		}
		if !retry.seen.Load() {
			t.Fatal("the client was not sent a Retry with a handshake in flight")
		}
		release()
		if err := <-stalledDone; err != nil {
			t.Fatalf("the stalled handshake: %v", err)
		}
	})
}

// stallHandshake starts a handshake from local to s that stays in flight
// (the client does not send its Finished while it checks the
// certificate), and returns once it is: release lets it finish, as the
// test's end does, and done has the dial's result.
func stallHandshake(t *testing.T, s *edge.Servers, local string, pool *x509.CertPool) (release func(), done <-chan error) {
	t.Helper()
	checking, released := make(chan struct{}), make(chan struct{})
	var checked, once sync.Once
	stalled := newQUICClient(t, local, pool)
	stalled.tls.VerifyConnection = func(tls.ConnectionState) error {
		checked.Do(func() { close(checking) })
		<-released
		return nil
	}
	release = func() { once.Do(func() { close(released) }) }
	// Before the client's transport closes: it waits for the handshake.
	t.Cleanup(release)
	dialed := make(chan error, 1)
	go func() {
		_, err := stalled.dial(s.HTTP3Addr(), nil)
		dialed <- err
	}()
	<-checking
	return release, dialed
}

// close ends the client's transport and every connection it dialed.
func (c *quicClient) close() { c.tr.Close() }

// quicGoroutines are the stacks of goroutines running in quic-go or
// package edge.
func quicGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "quic-go/") || strings.Contains(g, "gateway/edge.") {
			found = append(found, g)
		}
	}
	return found
}

func assertNoQUICGoroutines(t *testing.T) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if left = quicGoroutines(); len(left) == 0 {
			return
		}
	}
	t.Fatalf("goroutines of quic-go or package edge still running:\n%s", strings.Join(left, "\n\n"))
}

func TestHTTP3Drain(t *testing.T) {
	t.Run("a client that keeps an idle connection open past GOAWAY does not hold it", func(t *testing.T) {
		cert := newCertificate(t)
		s, err := edge.Listen(edge.Options{HTTPS: "127.0.0.1:0", HTTP3: true, ShutdownTimeout: time.Minute,
			TLS: &edge.TLSOptions{Certificates: []edge.CertificateFiles{cert.files}}}, okHandler, nil)
		if err != nil {
			t.Fatal(err)
		}
		s.Serve()
		// A bare QUIC connection: no HTTP/3 client reads the GOAWAY.
		client := newQUICClient(t, "127.0.0.2", roots(cert))
		conn, err := client.dial(s.HTTP3Addr(), nil)
		if err != nil {
			t.Fatal(err)
		}
		// The server's control stream: the server serves the connection.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.AcceptUniStream(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.Shutdown(); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		<-conn.Context().Done()
		var appErr *quic.ApplicationError
		if err := context.Cause(conn.Context()); !errors.As(err, &appErr) || appErr.ErrorCode != quic.ApplicationErrorCode(http3.ErrCodeNoError) || !appErr.Remote {
			t.Fatalf("the connection ended with %v, want H3_NO_ERROR from the gateway", err)
		}
		client.close()
		assertNoQUICGoroutines(t)
	})

	t.Run("a request in flight finishes, new ones are refused, then the port is free and every goroutine ended", func(t *testing.T) {
		entered, release := make(chan struct{}), make(chan struct{})
		public := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				close(entered)
				<-release
				io.WriteString(w, "finished")
				return
			}
			io.WriteString(w, "ok")
		})
		cert := newCertificate(t)
		s, err := edge.Listen(edge.Options{HTTPS: "127.0.0.1:0", HTTP3: true, TLS: &edge.TLSOptions{Certificates: []edge.CertificateFiles{cert.files}}}, public, nil)
		if err != nil {
			t.Fatal(err)
		}
		failures := s.Serve()
		pool := roots(cert)
		addr := s.HTTP3Addr()

		draining := newQUICClient(t, "127.0.0.2", pool)
		conn, err := draining.dial(addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		cc := (&http3.Transport{}).NewClientConn(conn)
		type result struct {
			body string
			err  error
		}
		answered := make(chan result, 1)
		go func() {
			req, _ := http.NewRequest(http.MethodGet, "https://localhost/slow", nil)
			res, err := cc.RoundTrip(req)
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

		late := newQUICClient(t, "127.0.0.3", pool)
		for deadline := time.Now().Add(5 * time.Second); !late.refused(addr); {
			if time.Now().After(deadline) {
				t.Fatal("new connections are still served during Shutdown")
			}
		}
		for deadline := time.Now().Add(5 * time.Second); ; {
			req, _ := http.NewRequest(http.MethodGet, "https://localhost/", nil)
			res, err := cc.RoundTrip(req)
			if err != nil {
				break
			}
			res.Body.Close()
			if time.Now().After(deadline) {
				t.Fatal("new requests on a draining connection are still served")
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
		udp, err := net.ListenUDP("udp", addr.(*net.UDPAddr))
		if err != nil {
			t.Fatalf("the HTTP/3 port is still bound: %v", err)
		}
		udp.Close()
		draining.close()
		late.close()
		assertNoQUICGoroutines(t)
		select {
		case err := <-failures:
			t.Fatalf("Shutdown reported as a listener failure: %v", err)
		default:
		}
	})
}
