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

// retryAboveHandshakes is how many QUIC handshakes from unproven
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
// holds connections to the same caps before the handshake's work, as TCP
// does at accept. A connection from a proven address (a Retry or a token)
// takes its place with its first packet, or is refused. One from an
// unproven address, which may be spoofed, takes none until its handshake
// completes, but counts: a client or listener without room for it sends
// the next one a Retry. So a client runs at most its cap of handshakes
// unproven and its cap proven. 0-RTT is off: a replayed request would
// reach the limiter and the upstream twice.
type quicEdge struct {
	conn    net.PacketConn // bound by Listen; closed by Servers
	server  *http3.Server
	counter *connCounter // nil: no caps
	// retryAbove is retryAboveHandshakes; tests change it.
	retryAbove int64
	config     quic.Config
	handshakes atomic.Int64 // from unproven addresses, in flight
	activity   *quicActivity

	mu        sync.Mutex
	transport *quic.Transport // nil until listen
	listener  *quicListener
}

func newQUICEdge(conn net.PacketConn, h http.Handler, opts Options, caps connectionCaps) *quicEdge {
	activity := newQUICActivity()
	return &quicEdge{
		conn:       conn,
		counter:    newConnCounter(caps),
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
	ln, err := tr.Listen(http3.ConfigureTLSConfig(tlsConfig), &q.config)
	if err != nil {
		tr.Close()
		return nil, fmt.Errorf("edge: listen http3: %w", err)
	}
	q.transport = tr
	q.listener = &quicListener{ln: ln}
	return q.listener, nil
}

// needsRetry is the transport's VerifySourceAddress, asked for each
// Initial without a token: Retry once retryAbove handshakes are in flight,
// or when the caps have no room for addr's connection with every
// handshake in flight counted.
func (q *quicEdge) needsRetry(addr net.Addr) bool {
	inFlight := q.handshakes.Load()
	return inFlight >= q.retryAbove || q.counter != nil && q.counter.crowded(addr, inFlight)
}

var errNoRoom = errors.New("edge: max_connections or max_connections_per_client reached")

// quicPlaceKey is, in a connection's context, its *quicPlace.
type quicPlaceKey struct{}

// quicPlace is what one QUIC connection holds of the caps, from its first
// packet until it ends (end): its slot once its address is proven, and
// until its handshake completes (accept), its count as unproven.
type quicPlace struct {
	q  *quicEdge
	mu sync.Mutex
	// unproven: counted in q.handshakes, and by client in pending.
	unproven bool
	pending  connSlot
	slot     connSlot
	held     bool // slot is held
	ended    bool
}

// connContext is the transport's ConnContext, called for each new
// connection before its handshake: a proven address takes its place or is
// refused; an unproven one is counted.
func (q *quicEdge) connContext(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
	p := &quicPlace{q: q}
	if info.AddrVerified {
		if q.counter != nil {
			slot, ok := q.counter.reserve(info.RemoteAddr)
			if !ok {
				return nil, errNoRoom
			}
			p.slot, p.held = slot, true
		}
	} else {
		p.unproven = true
		q.handshakes.Add(1)
		if q.counter != nil {
			p.pending = q.counter.expect(info.RemoteAddr)
		}
	}
	ctx = context.WithValue(ctx, quicPlaceKey{}, p)
	// ctx ends when the connection does, its handshake failed or not.
	context.AfterFunc(ctx, p.end)
	ctx, _ = withFingerprint(ctx, true)
	return ctx, nil
}

// accept ends the count of a completed handshake as unproven; a
// connection without its slot yet takes it now. False: the connection
// ended, or is refused at a cap.
func (p *quicPlace) accept(peer net.Addr) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return false
	}
	p.settle()
	if !p.held && p.q.counter != nil {
		p.slot, p.held = p.q.counter.reserve(peer)
	}
	return p.held || p.q.counter == nil
}

// end gives back whatever the connection holds.
func (p *quicPlace) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = true
	p.settle()
	if p.held {
		p.held = false
		p.q.counter.release(p.slot)
	}
}

func (p *quicPlace) settle() {
	if !p.unproven {
		return
	}
	p.unproven = false
	p.q.handshakes.Add(-1)
	if p.q.counter != nil {
		p.q.counter.forget(p.pending)
	}
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

// quicListener hands out the connections whose handshake completed under
// the caps (quicPlace.accept); one from an unproven address that finds no
// room is closed with H3_EXCESSIVE_LOAD.
type quicListener struct {
	ln *quic.Listener
}

func (l *quicListener) Accept(ctx context.Context) (*quic.Conn, error) {
	for {
		conn, err := l.ln.Accept(ctx)
		if err != nil {
			return nil, err
		}
		if p, ok := conn.Context().Value(quicPlaceKey{}).(*quicPlace); ok && !p.accept(conn.RemoteAddr()) {
			conn.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeExcessiveLoad), "")
			continue
		}
		return conn, nil
	}
}

func (l *quicListener) Addr() net.Addr { return l.ln.Addr() }

func (l *quicListener) Close() error { return l.ln.Close() }
