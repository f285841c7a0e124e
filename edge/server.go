package edge

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Servers are the gateway's listeners with every protection wired in. Each
// public listener caps its open connections, holds every HTTP/1 request to
// the framing scan of its connection (framingCheck: a refused request gets
// 400 and the public handler never sees it; what the scan cannot follow
// ends the connection after the current response) and applies the listen
// timeouts. The HTTPS
// listener terminates TLS with the static and ACME certificates, offers
// HTTP/2, and adds Strict-Transport-Security when asked. The plain-HTTP
// listener answers ACME HTTP-01 challenges before anything else and, when
// asked, redirects the rest to HTTPS. With HTTP3, the HTTPS listener's
// port serves HTTP/3 over UDP too (quicEdge), and its HTTP/1.1 and HTTP/2
// responses announce it in Alt-Svc.
//
// The lifecycle is Listen, Serve, then Shutdown or Close; Shutdown and Close
// may also follow Listen directly. Every goroutine Servers starts has ended
// when Shutdown or Close returns.
type Servers struct {
	opts     Options      // with the defaults filled
	logger   *slog.Logger // never nil
	errorLog *log.Logger  // the servers' own complaints, into logger
	tls      *terminator  // nil without TLS
	tunnels  *tunnels     // the public listeners' hijacked connections
	errs     chan error
	stopTLS  sync.Once

	httpLn, httpsLn, adminLn net.Listener
	plain, secure            *fastServer
	admin                    *http.Server
	quicConn                 net.PacketConn // the HTTPS port over UDP; nil without HTTP3
	quic                     *quicEdge      // nil without HTTP3
	rateLimitLn              net.Listener   // nil without RateLimitGRPC
	rateLimit                GRPCServer     // nil until ServeRateLimit

	mu       sync.Mutex
	serving  bool
	closed   bool
	stopACME context.CancelFunc // nil until Serve starts ACME
	running  sync.WaitGroup     // the serve goroutines and the ACME one
}

// Listen validates opts, binds every listener and builds the TLS state, but
// serves nothing yet. Binding first matters: ACME challenges are answered on
// the ports these sockets really have, which with port 0 are known only now.
// On error nothing stays bound.
//
// public serves the HTTP and HTTPS listeners, admin the admin listener; each
// is required when its listeners are configured.
func Listen(opts Options, public, admin http.Handler) (*Servers, error) {
	opts = opts.withDefaults()
	if err := opts.validate(public, admin); err != nil {
		return nil, fmt.Errorf("edge: %w", err)
	}
	s := &Servers{opts: opts, logger: opts.Logger, errs: make(chan error, 4)}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	s.errorLog = NewErrorLog(s.logger)
	static, err := loadStatic(opts.TLS)
	if err != nil {
		return nil, err
	}
	if err := s.bind(); err != nil {
		s.closeListeners()
		return nil, err
	}
	if t := opts.TLS; t != nil {
		var ports challengePorts
		if t.ACME != nil {
			if s.httpLn != nil && t.ACME.allows(ChallengeHTTP01) {
				ports.http = port(s.httpLn)
			}
			if t.ACME.allows(ChallengeTLSALPN01) {
				ports.tlsALPN = port(s.httpsLn)
			}
		}
		// The caller's logger, not the discarding default: certmagic's
		// messages are not even encoded when nobody reads them.
		if s.tls, err = newTLS(static, newClientAuth(t), t.ACME, ports, opts.Logger); err != nil {
			s.closeListeners()
			return nil, err
		}
	}
	s.build(public, admin)
	return s, nil
}

func loadStatic(t *TLSOptions) ([]tls.Certificate, error) {
	if t == nil {
		return nil, nil
	}
	return loadCertificates(t.Certificates)
}

func (s *Servers) bind() error {
	for _, l := range []struct {
		name, addr string
		ln         *net.Listener
	}{
		{"http", s.opts.HTTP, &s.httpLn},
		{"https", s.opts.HTTPS, &s.httpsLn},
		{"admin", s.opts.Admin, &s.adminLn},
		{"ratelimit_grpc", s.opts.RateLimitGRPC, &s.rateLimitLn},
	} {
		if l.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			return fmt.Errorf("edge: listen %s: %w", l.name, err)
		}
		*l.ln = ln
	}
	if s.opts.HTTP3 {
		tcp := s.httpsLn.Addr().(*net.TCPAddr)
		conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: tcp.IP, Port: tcp.Port, Zone: tcp.Zone})
		if err != nil {
			return fmt.Errorf("edge: listen http3: %w", err)
		}
		s.quicConn = conn
	}
	return nil
}

// build makes the servers. The handler chains are fixed here, once: the
// request path only runs them.
func (s *Servers) build(public, admin http.Handler) {
	refusals := newFramingRefusals(s.opts.Registerer, s.logger)
	s.tunnels = newTunnels()
	if s.httpsLn != nil {
		t := s.opts.TLS
		secure := hsts(public, t.HSTSMaxAge, t.HSTSIncludeSubdomains)
		if s.quicConn != nil {
			// HTTP/3 serves what HTTPS serves but the framing check,
			// which is HTTP/1's.
			s.quic = newQUICEdge(s.quicConn, secure, s.opts, s.caps())
			secure = withAltSvc(secure, altSvc(port(s.httpsLn)))
		}
		s.secure = newPublicServer(secure, "https", s.opts, refusals, s.tunnels, s.errorLog)
		s.secure.srv.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: maxStreamsPerConnection}
		// The framing listener terminates TLS itself and hands HTTP/2
		// connections over as *tls.Conn; with h2 in TLSConfig.NextProtos,
		// Serve speaks HTTP/2 on them. Serve gets the listener a config of
		// its own: http.Server adjusts this one for HTTP/2 while the
		// listener may already be handshaking.
		s.secure.srv.TLSConfig = s.tls.config()
	}
	if s.httpLn != nil {
		plain := public
		if s.tls != nil {
			if s.opts.TLS.RedirectHTTP {
				plain = redirectToHTTPS(port(s.httpsLn))
			}
			plain = s.tls.httpChallenge(plain)
		}
		s.plain = newPublicServer(plain, "http", s.opts, refusals, s.tunnels, s.errorLog)
	}
	if s.adminLn != nil {
		s.admin = &http.Server{
			Handler:           admin,
			ReadHeaderTimeout: adminReadHeaderTimeout,
			IdleTimeout:       adminIdleTimeout,
			ErrorLog:          s.errorLog,
		}
	}
}

// newPublicServer is the one way to build a public listener's server: the
// fast path for plain HTTP/1.1 requests in front of net/http's server
// (fastServer), the framing check in front of h, the connection context it
// finds scanned connections by, and "OPTIONS *" passed to the check rather
// than answered by http.Server behind its back. It must serve a framing
// listener (newFramingListener); on any other it refuses every HTTP/1
// request rather than serve one unchecked.
func newPublicServer(h http.Handler, listener string, opts Options, refusals *framingRefusals, tunnels *tunnels, errorLog *log.Logger) *fastServer {
	return newFastServer(&http.Server{
		Handler:                      &framingCheck{next: h, listener: listener, refusals: refusals},
		ConnContext:                  connContext,
		ConnState:                    tunnels.connState,
		DisableGeneralOptionsHandler: true,
		ReadHeaderTimeout:            opts.ReadHeaderTimeout,
		IdleTimeout:                  opts.IdleTimeout,
		MaxHeaderBytes:               opts.MaxHeaderBytes,
		ErrorLog:                     errorLog,
	})
}

func (s *Servers) caps() connectionCaps {
	return connectionCaps{total: s.opts.MaxConnections, perClient: s.opts.MaxConnectionsPerClient, exempt: s.opts.TrustedProxies, ipv6Bits: s.opts.ClientIPv6Prefix, logger: s.logger}
}

func port(ln net.Listener) int { return ln.Addr().(*net.TCPAddr).Port }

// Serve starts serving on every listener, then starts ACME issuance and
// renewal: certificates are obtained once the HTTP listener can answer
// HTTP-01, and until then the HTTPS listener has no certificate for those
// names. It returns at once. The channel receives each listener failure
// (any end of a listener but Shutdown or Close); it is never closed. Serve
// after Shutdown or Close serves nothing; a second Serve changes nothing.
func (s *Servers) Serve() <-chan error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.serving || s.closed {
		return s.errs
	}
	s.serving = true
	if s.secure != nil {
		ln := newFramingListener(limitConnections(s.httpsLn, s.caps()), s.tls.config(), s.opts.ReadHeaderTimeout)
		s.serveOn(s.secure, ln)
	}
	if s.quic != nil {
		s.serveQUIC()
	}
	if s.plain != nil {
		s.serveOn(s.plain, newFramingListener(limitConnections(s.httpLn, s.caps()), nil, 0))
	}
	if s.admin != nil {
		s.serveOn(s.admin, s.adminLn)
	}
	s.serveRateLimit()
	if s.tls != nil && s.tls.magic != nil {
		ctx, cancel := context.WithCancel(context.Background())
		s.stopACME = cancel
		s.running.Go(func() {
			if err := s.tls.manage(ctx); err != nil && ctx.Err() == nil {
				s.logger.Error("acme: cannot obtain certificates", "error", err.Error())
			}
		})
	}
	return s.errs
}

// serveOn serves ln until Shutdown or Close; any other end is a failure.
// errs has room for one failure per server, so this never blocks.
func (s *Servers) serveOn(srv interface{ Serve(net.Listener) error }, ln net.Listener) {
	s.running.Go(func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.errs <- err
		}
	})
}

// serveQUIC serves HTTP/3 until Shutdown or Close, like serveOn.
func (s *Servers) serveQUIC() {
	ln, err := s.quic.listen(s.tls.config())
	if err != nil {
		s.errs <- err
		return
	}
	s.running.Go(func() {
		if err := s.quic.server.ServeListener(ln); !errors.Is(err, http.ErrServerClosed) {
			s.errs <- fmt.Errorf("edge: http3: %w", err)
		}
	})
}

// HTTPAddr is the bound address of the plain-HTTP listener, nil without one.
func (s *Servers) HTTPAddr() net.Addr { return addr(s.httpLn) }

// HTTPSAddr is the bound address of the HTTPS listener, nil without one.
func (s *Servers) HTTPSAddr() net.Addr { return addr(s.httpsLn) }

// HTTP3Addr is the bound UDP address of HTTP/3, nil without it.
func (s *Servers) HTTP3Addr() net.Addr {
	if s.quicConn == nil {
		return nil
	}
	return s.quicConn.LocalAddr()
}

// AdminAddr is the bound address of the admin listener, nil without one.
func (s *Servers) AdminAddr() net.Addr { return addr(s.adminLn) }

func addr(ln net.Listener) net.Addr {
	if ln == nil {
		return nil
	}
	return ln.Addr()
}

// SwapCertificates loads the static certificate files and, only if every
// pair loads, makes them the certificates of every handshake from now on;
// established connections keep theirs. ACME certificates are not touched.
// Without TLS it does nothing and returns nil. It is meant for SIGHUP.
func (s *Servers) SwapCertificates(files []CertificateFiles) error {
	if s.tls == nil {
		return nil
	}
	certs, err := loadCertificates(files)
	if err != nil {
		return err
	}
	s.tls.static.swap(certs)
	return nil
}

// SwapClientCAs makes roots the roots of client certificates for every
// handshake from now on; established connections stay open (what their
// certificates identify is the client_cert subject's to say).
// It does nothing without TLS, or when the listener was started without
// client certificates (asking for them at all is decided on restart), or
// when roots is nil. It is meant for SIGHUP.
func (s *Servers) SwapClientCAs(roots *x509.CertPool) {
	if s.tls == nil || s.tls.clients == nil || roots == nil {
		return
	}
	s.tls.clients.roots.Store(roots)
}

// ShutdownTimeout is how long Shutdown lets requests in flight finish:
// Options.ShutdownTimeout, or its default.
func (s *Servers) ShutdownTimeout() time.Duration { return s.opts.ShutdownTimeout }

// Shutdown stops accepting, lets requests in flight finish within
// ShutdownTimeout and closes the connections left past it, returning an
// error then. Upgraded tunnels (hijacked connections, which http.Server no
// longer tracks) get the same time: one still open when ShutdownTimeout
// passes is closed, client side, which ends its copy and closes its
// upstream side too, and counts as a drain that timed out. It then closes the admin server, cancels ACME work (an
// issuance under way is abandoned, not waited for), waits for its goroutine
// and stops certmagic's renewals. Every goroutine Servers started has ended
// when it returns, and every port is free.
func (s *Servers) Shutdown() error {
	s.markClosed()
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancel()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for name, srv := range map[string]*fastServer{"http": s.plain, "https": s.secure} {
		if srv == nil {
			continue
		}
		wg.Go(func() {
			if err := srv.Shutdown(ctx); err != nil {
				srv.Close()
				mu.Lock()
				errs = append(errs, fmt.Errorf("edge: drain %s listener: %w", name, err))
				mu.Unlock()
			}
		})
	}
	wg.Go(func() {
		if err := s.stopRateLimit(ctx); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	})
	if s.quic != nil {
		wg.Go(func() {
			if err := s.quic.shutdown(ctx); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("edge: drain http3: %w", err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if s.tunnels != nil && !s.tunnels.wait(ctx) {
		if n := s.tunnels.closeAll(); n > 0 {
			errs = append(errs, fmt.Errorf("edge: drain: %d upgraded connections still open at the shutdown timeout were closed", n))
		}
	}
	if s.admin != nil {
		s.admin.Close()
	}
	s.release()
	return errors.Join(errs...)
}

// Close closes every listener and connection at once, stops ACME work and
// waits for every goroutine Servers started, like Shutdown without the
// drain. It is meant for failures between Listen and a running gateway.
func (s *Servers) Close() {
	s.markClosed()
	for _, srv := range []*fastServer{s.plain, s.secure} {
		if srv != nil {
			srv.Close()
		}
	}
	if s.admin != nil {
		s.admin.Close()
	}
	if s.quic != nil {
		s.quic.close()
	}
	if s.rateLimit != nil {
		s.rateLimit.Stop()
	}
	if s.tunnels != nil {
		s.tunnels.closeAll()
	}
	s.release()
}

// markClosed keeps a later Serve from starting anything.
func (s *Servers) markClosed() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// release frees what the servers do not: the sockets when Serve never ran,
// the ACME goroutine and certmagic's cache.
func (s *Servers) release() {
	s.closeListeners()
	s.mu.Lock()
	stopACME := s.stopACME
	s.mu.Unlock()
	if stopACME != nil {
		stopACME()
	}
	s.running.Wait()
	if s.tls != nil {
		s.stopTLS.Do(s.tls.stop)
	}
}

func (s *Servers) closeListeners() {
	for _, ln := range []net.Listener{s.httpLn, s.httpsLn, s.adminLn, s.rateLimitLn} {
		if ln != nil {
			ln.Close()
		}
	}
	if s.quicConn != nil {
		s.quicConn.Close()
	}
}
