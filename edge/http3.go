package edge

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// maxStreamsPerConnection is how many requests one HTTP/2 or HTTP/3
// connection may have open at once (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS,
// QUIC's bidirectional stream limit): one number, so that neither protocol
// lets a connection do more than the other.
const maxStreamsPerConnection = 250

// retryAboveHandshakes is how many QUIC handshakes from unvalidated
// addresses may be in flight before every new one must first prove its
// address with a Retry. Below it a client pays no extra round trip; above
// it a flood of Initial packets from spoofed addresses gets one small
// Retry packet each and holds no handshake state, so the listener neither
// amplifies nor fills up.
const retryAboveHandshakes = 128

// altSvcMaxAge is how long a client may remember that HTTP/3 is served:
// a day, so that turning http3 off is forgotten within one.
const altSvcMaxAge = 24 * time.Hour

// quicEdge is HTTP/3 on the HTTPS listener's port, over UDP. It serves the
// HTTPS listener's handler with the same TLS configuration (certificates,
// ACME, whatever GetConfigForClient decides) offering only "h3", and
// holds connections to the same caps: the per-client cap counts QUIC
// connections as the TCP listener counts its own, once the handshake has
// proven the peer's address; a client at its cap is refused before any
// handshake. 0-RTT is off: a replayed request would reach the limiter and
// the upstream twice.
type quicEdge struct {
	conn   net.PacketConn // bound by Listen; closed by Servers
	server *http3.Server
	caps   connectionCaps
	// retryAbove is retryAboveHandshakes; tests change it.
	retryAbove int64
	config     quic.Config
	handshakes atomic.Int64 // from unvalidated addresses, in flight
	activity   *quicActivity

	mu        sync.Mutex
	transport *quic.Transport // nil until listen
	listener  *quicListener
}

func newQUICEdge(conn net.PacketConn, h http.Handler, opts Options, caps connectionCaps) *quicEdge {
	activity := newQUICActivity()
	return &quicEdge{
		conn:       conn,
		caps:       caps,
		retryAbove: retryAboveHandshakes,
		activity:   activity,
		server: &http3.Server{
			Handler:           activity.counting(h),
			ConnContext:       activity.connContext,
			MaxHeaderBytes:    opts.MaxHeaderBytes,
			ReadHeaderTimeout: opts.ReadHeaderTimeout,
			IdleTimeout:       opts.IdleTimeout,
		},
		config: quic.Config{
			// As on TCP, read_header_timeout bounds the handshake.
			HandshakeIdleTimeout: opts.ReadHeaderTimeout,
			MaxIdleTimeout:       opts.IdleTimeout,
			MaxIncomingStreams:   maxStreamsPerConnection,
			Allow0RTT:            false,
		},
	}
}

// altSvc is the Alt-Svc value that announces HTTP/3 on port.
func altSvc(port int) []string {
	return []string{fmt.Sprintf(`h3=":%d"; ma=%d`, port, int(altSvcMaxAge/time.Second))}
}

// withAltSvc adds value as Alt-Svc to every response of next.
func withAltSvc(next http.Handler, value []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Alt-Svc"] = value
		next.ServeHTTP(w, r)
	})
}

// listen starts the QUIC transport on the bound socket with tlsConfig,
// made to offer "h3" alone.
func (q *quicEdge) listen(tlsConfig *tls.Config) (*quicListener, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	tr := &quic.Transport{
		Conn:                q.conn,
		VerifySourceAddress: q.needsRetry,
		ConnContext:         q.connContext,
	}
	counter := newConnCounter(q.caps)
	ln, err := tr.Listen(http3.ConfigureTLSConfig(tlsConfig), &q.config)
	if err != nil {
		tr.Close()
		return nil, fmt.Errorf("edge: listen http3: %w", err)
	}
	q.transport = tr
	q.listener = &quicListener{ln: ln, counter: counter}
	return q.listener, nil
}

// needsRetry is the transport's VerifySourceAddress: Retry once
// retryAbove handshakes are in flight.
func (q *quicEdge) needsRetry(net.Addr) bool {
	return q.handshakes.Load() >= q.retryAbove
}

var errClientAtCap = errors.New("edge: the client holds max_connections_per_client")

// handshakeKey marks, in a connection's context, a handshake counted in
// quicEdge.handshakes.
type handshakeKey struct{}

// handshake is one counted handshake; done uncounts it once, when it
// completes (the connection is accepted) or the connection ends first.
type handshake struct {
	once sync.Once
	n    *atomic.Int64
}

func (h *handshake) done() { h.once.Do(func() { h.n.Add(-1) }) }

// connContext is the transport's ConnContext, called for each new
// connection before its handshake.
func (q *quicEdge) connContext(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
	q.mu.Lock()
	full := q.listener != nil && q.listener.counter.full(info.RemoteAddr)
	q.mu.Unlock()
	if full {
		return nil, errClientAtCap
	}
	if !info.AddrVerified {
		h := &handshake{n: &q.handshakes}
		q.handshakes.Add(1)
		ctx = context.WithValue(ctx, handshakeKey{}, h)
		context.AfterFunc(ctx, h.done)
	}
	ctx, _ = withFingerprint(ctx, true)
	return ctx, nil
}

// shutdown refuses new connections, sends GOAWAY on the open ones and
// lets their requests finish until ctx ends, then closes what is left. A
// connection the client keeps open without a request in flight is closed
// after drainIdleAfter.
func (q *quicEdge) shutdown(ctx context.Context) error {
	q.closeListener()
	done := make(chan error, 1)
	go func() { done <- q.server.Shutdown(ctx) }()
	tick := time.NewTicker(drainIdleAfter / 4)
	defer tick.Stop()
	var err error
	for waiting := true; waiting; {
		select {
		case err = <-done:
			waiting = false
		case now := <-tick.C:
			q.activity.closeIdle(now)
		}
	}
	q.closeTransport()
	return err
}

// close closes every connection at once.
func (q *quicEdge) close() {
	q.closeListener()
	q.server.Close()
	q.closeTransport()
}

func (q *quicEdge) closeListener() {
	q.mu.Lock()
	ln := q.listener
	q.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
}

func (q *quicEdge) closeTransport() {
	q.mu.Lock()
	tr := q.transport
	q.mu.Unlock()
	if tr != nil {
		tr.Close()
	}
}

// quicListener is the QUIC listener under the connection caps: at most
// caps.total connections open (the next waits in quic-go's accept queue,
// and past it is refused), and of one client at most caps.perClient: its
// next connection is closed with H3_EXCESSIVE_LOAD once accepted.
type quicListener struct {
	ln      *quic.Listener
	counter *connCounter // nil: no caps
}

func (l *quicListener) Accept(ctx context.Context) (*quic.Conn, error) {
	for {
		if l.counter != nil && !l.counter.acquire(ctx) {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			return nil, quic.ErrServerClosed
		}
		conn, err := l.ln.Accept(ctx)
		if err != nil {
			if l.counter != nil {
				l.counter.releaseSlot()
			}
			return nil, err
		}
		if h, ok := conn.Context().Value(handshakeKey{}).(*handshake); ok {
			h.done()
		}
		if l.counter == nil {
			return conn, nil
		}
		slot, ok := l.counter.admit(conn.RemoteAddr())
		if !ok {
			conn.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeExcessiveLoad), "")
			continue
		}
		context.AfterFunc(conn.Context(), func() { l.counter.release(slot) })
		return conn, nil
	}
}

func (l *quicListener) Addr() net.Addr { return l.ln.Addr() }

func (l *quicListener) Close() error {
	if l.counter != nil {
		l.counter.stop()
	}
	return l.ln.Close()
}
