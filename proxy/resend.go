package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
)

// The lean transport (transport.go) sends nothing twice and needs no
// guard; what follows is for the requests the standard Transport carries.
//
// Go's transport sends a request again, on another connection, when the
// keep-alive connection it reused failed before a response byte and either
// nothing of the request was written (and it has no body) or the request
// is "replayable": no body and GET, HEAD, OPTIONS or TRACE, or any method
// with an Idempotency-Key or X-Idempotency-Key header (Request.isReplayable).
// In the second case the upstream may well have read the request (an
// upstream that reads it and closes without answering), and a POST a
// client marked with Idempotency-Key went upstream twice. The gateway
// resends nothing that may have reached a target, whatever the client's
// headers say; the transport has no setting for that, so each request
// sent carries a sendGuard that sees every try and ends the request
// rather than let a forbidden resend go out.
//
// The guard learns of each try from the client trace (GotConn), and of a
// response from GotFirstResponseByte. Each upstream connection the pool's
// transport dials is an upstreamConn, which learns from the trace which
// guard's try it carries and whether any byte of it was written. The
// transport closes a failed connection before it decides on a resend, and
// it checks the request's context before every try: when a connection
// closes under a try that got no response byte and either had bytes
// written or may not be resent, the guard cancels its context there, so
// the try after it never starts. What is left to resend is a try that
// wrote nothing of a request mayResend allows: it never reached the
// target. Each resend is counted in gateway_upstream_requests_total and
// gateway_upstream_retries_total.
//
// HTTP/2 connections carry many requests at once and are left to the
// HTTP/2 transport, which resends only what the server says it did not
// process (GOAWAY past the stream, REFUSED_STREAM) or a request it could
// not start; those resends are counted too.

// errNotResent ends a request whose connection closed after it was sent and
// before any answer: it may have reached the target, so it is not sent
// again. It wraps io.ErrUnexpectedEOF, which classify counts as a reset.
var errNotResent = fmt.Errorf("proxy: the upstream connection closed before any response to a request that may have reached it; not sent again: %w", io.ErrUnexpectedEOF)

// sendGuard watches the tries of one request sent to one member.
type sendGuard struct {
	member    *member
	mayResend bool
	cancel    context.CancelCauseFunc
	trace     httptrace.ClientTrace
	tries     int                          // connections obtained; the transport's caller goroutine only
	answered  atomic.Bool                  // a response byte arrived
	conn      atomic.Pointer[upstreamConn] // of the current try; nil for HTTP/2
}

// mayBeResent reports whether the standard Transport might send req more
// than once, and so needs a guard. Over plain http, which the pool's
// transport speaks as HTTP/1 alone, a request with a body it cannot rewind
// (no GetBody, as for every request a server read) is sent once: not again
// when nothing of it was written (its length is not zero), nor after (it
// is not replayable, Idempotency-Key or not). Its guard would cost seven
// allocations for nothing.
func mayBeResent(req *http.Request) bool {
	return req.URL.Scheme != "http" || req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// guard returns req with a context that carries a new guard's trace and
// can be cancelled by it.
func (m *member) guard(req *http.Request) *http.Request {
	g := &sendGuard{member: m, mayResend: mayResend(req)}
	g.trace.GotConn = g.gotConn
	g.trace.GotFirstResponseByte = g.gotFirstResponseByte
	ctx, cancel := context.WithCancelCause(httptrace.WithClientTrace(req.Context(), &g.trace))
	g.cancel = cancel
	return req.WithContext(ctx)
}

func (g *sendGuard) gotConn(info httptrace.GotConnInfo) {
	g.tries++
	if g.tries > 1 {
		m := g.member
		if m.requests != nil {
			m.requests.Inc()
			m.retries.Inc()
		}
	}
	c := upstreamConnOf(info.Conn)
	g.conn.Store(c)
	if c != nil {
		c.startTry(g)
	}
}

// gotFirstResponseByte ends the guard's watch: the transport resends
// nothing once a response has begun. The connection forgets the guard,
// which would otherwise keep the request's context alive while the
// connection idles.
func (g *sendGuard) gotFirstResponseByte() {
	g.answered.Store(true)
	if c := g.conn.Load(); c != nil {
		c.endTry(g)
	}
}

// lost is told that the connection of a try closed; reached says whether
// any byte of the try was written.
func (g *sendGuard) lost(reached bool) {
	if g.answered.Load() {
		return
	}
	if reached || !g.mayResend {
		g.cancel(errNotResent)
	}
}

// upstreamConn is a connection the pool's transport dialed: it tells the
// guard of the try it carries when it closes.
type upstreamConn struct {
	net.Conn
	mu      sync.Mutex
	try     *sendGuard // nil: no guarded try yet
	reached bool       // a byte of the try was written
	closed  bool
}

// upstreamConnOf finds the upstreamConn of an HTTP/1 connection the trace
// names, or nil: an HTTP/2 connection (many tries at once) or one the
// pool's transport did not dial.
func upstreamConnOf(c net.Conn) *upstreamConn {
	if tc, ok := c.(*tls.Conn); ok {
		if tc.ConnectionState().NegotiatedProtocol == "h2" {
			return nil
		}
		c = tc.NetConn()
	}
	uc, _ := c.(*upstreamConn)
	return uc
}

func (c *upstreamConn) startTry(g *sendGuard) {
	c.mu.Lock()
	c.try, c.reached = g, false
	closed := c.closed
	c.mu.Unlock()
	if closed {
		g.lost(false)
	}
}

func (c *upstreamConn) endTry(g *sendGuard) {
	c.mu.Lock()
	if c.try == g {
		c.try = nil
	}
	c.mu.Unlock()
}

func (c *upstreamConn) Write(p []byte) (int, error) {
	// Marked before the bytes go: a close racing this write must take the
	// try as reached.
	c.mu.Lock()
	was := c.reached
	c.reached = true
	c.mu.Unlock()
	n, err := c.Conn.Write(p)
	if n == 0 && !was {
		c.mu.Lock()
		c.reached = false
		c.mu.Unlock()
	}
	return n, err
}

func (c *upstreamConn) Close() error {
	c.mu.Lock()
	g, reached := c.try, c.reached
	c.try, c.closed = nil, true
	c.mu.Unlock()
	if g != nil {
		g.lost(reached)
	}
	return c.Conn.Close()
}
