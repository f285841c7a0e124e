package edge

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"time"
)

// Go's HTTP/1 server follows RFC 9112's rule for intermediaries when a
// request has both Content-Length and Transfer-Encoding: it drops the
// Content-Length and reads the chunked body, and the handler cannot tell.
// The gateway refuses such requests instead, like the RFC lets a server do,
// so it never forwards a message two parsers might frame differently. To see
// the header it scans each HTTP/1 connection's bytes as the server reads
// them, after TLS, and hands the handler one verdict per request
// (scanner.go); framingCheck holds each request to its verdict
// (framing_check.go).

// newFramingListener wraps a listener so that framingCheck can judge each
// HTTP/1 request. With cfg set it terminates TLS itself: HTTP/2
// connections go to the server untouched (HTTP/2 has its own framing), and
// HTTP/1 ones are scanned, so the server sees them as plain connections;
// framingCheck gives their requests back their TLS state.
//
// Close returns only once the accept loop and every handshake under way have
// ended; handshakes under way are cut short.
func newFramingListener(l net.Listener, cfg *tls.Config, handshakeTimeout time.Duration) net.Listener {
	closing, shut := context.WithCancel(context.Background())
	fl := &framingListener{Listener: l, cfg: cfg, timeout: handshakeTimeout, accepted: make(chan acceptResult), closing: closing, shut: shut}
	fl.wg.Add(1)
	go fl.acceptLoop()
	return fl
}

type framingListener struct {
	net.Listener
	cfg      *tls.Config
	timeout  time.Duration
	accepted chan acceptResult
	// closing is done once the listener is closed: deliveries give up and
	// handshakes under way are interrupted.
	closing context.Context
	shut    context.CancelFunc
	// wg counts the accept loop and the handshakes under way.
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
	mu        sync.Mutex
	err       error // why the inner listener stopped, when it did first
}

// acceptResult is a connection ready for the server, or an accept error
// the server retries.
type acceptResult struct {
	c   net.Conn
	err error
}

func (l *framingListener) acceptLoop() {
	defer l.wg.Done()
	for {
		c, err := l.Listener.Accept()
		//lint:ignore SA1019 Temporary is what http.Server.Serve retries on, after a pause and a log line.
		if ne, ok := err.(net.Error); ok && ne.Temporary() {
			// Out of file descriptors, say: the server backs off before
			// its next Accept, and this loop waits for that Accept rather
			// than dying, which would leave the server retrying forever on
			// a listener that no longer accepts.
			l.hand(acceptResult{err: err})
			continue
		}
		if err != nil {
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			l.stop()
			return
		}
		if l.cfg == nil {
			l.deliver(&framingConn{Conn: c})
			continue
		}
		// Handshakes run beside Accept, so a slow client holds up only itself.
		l.wg.Add(1)
		go l.handshake(c)
	}
}

func (l *framingListener) handshake(c net.Conn) {
	defer l.wg.Done()
	ctx := l.closing
	if l.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.timeout)
		defer cancel()
	}
	ctx, f := withFingerprint(ctx, false)
	tc := tls.Server(&fingerprintedConn{Conn: c, fingerprint: f}, l.cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		tc.Close()
		return
	}
	state := tc.ConnectionState()
	switch state.NegotiatedProtocol {
	case "h2":
		l.deliver(tc)
	case "acme-tls/1":
		tc.Close() // the challenge was the handshake itself
	default:
		l.deliver(&framingConn{Conn: tc, tls: &state})
	}
}

func (l *framingListener) deliver(c net.Conn) {
	if !l.hand(acceptResult{c: c}) {
		c.Close()
	}
}

// hand passes r to the next Accept; false if the listener closed first.
func (l *framingListener) hand(r acceptResult) bool {
	select {
	case l.accepted <- r:
		return true
	case <-l.closing.Done():
		return false
	}
}

func (l *framingListener) Accept() (net.Conn, error) {
	select {
	case r := <-l.accepted:
		return r.c, r.err
	case <-l.closing.Done():
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.err != nil {
			return nil, l.err
		}
		return nil, net.ErrClosed
	}
}

// stop closes the listener without waiting, for the accept loop itself.
func (l *framingListener) stop() error {
	l.closeOnce.Do(func() {
		l.shut()
		l.closeErr = l.Listener.Close()
	})
	return l.closeErr
}

func (l *framingListener) Close() error {
	err := l.stop()
	l.wg.Wait()
	return err
}

type connKey struct{}

// connContext is the http.Server hook that lets the framing check find a
// request's connection.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if f := connFingerprint(c); f != nil {
		ctx = context.WithValue(ctx, fingerprintKey{}, f)
	}
	if fc, ok := c.(*framingConn); ok {
		return context.WithValue(ctx, connKey{}, fc)
	}
	return ctx
}

// framingConn scans the HTTP/1 request stream it carries and queues the
// scanner's verdict on each request head, for the framing check to take
// when the server serves that request.
type framingConn struct {
	net.Conn
	tls *tls.ConnectionState

	mu       sync.Mutex
	s        scanner
	verdicts []verdict // scanned heads the server has not served yet, in order
	// lost: the scanner stopped following the stream, so no verdict comes
	// after those queued.
	lost bool
	// tunnels holds the connection once a handler hijacked it; nil before.
	// Set by the hijacking goroutine, which is the one that closes it.
	tunnels *tunnels
	// replay is what the fast path read and scanned but handed to net/http
	// unserved: Read returns it first.
	replay []byte
}

func (c *framingConn) Close() error {
	err := c.Conn.Close()
	if c.tunnels != nil {
		c.tunnels.remove(c)
	}
	return err
}

func (c *framingConn) Read(p []byte) (int, error) {
	if len(c.replay) > 0 {
		n := copy(p, c.replay)
		c.replay = c.replay[n:]
		return n, nil
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.s.feed(p[:n], c.queue, c.markLost)
		c.mu.Unlock()
	}
	return n, err
}

func (c *framingConn) queue(v verdict) { c.verdicts = append(c.verdicts, v) }
func (c *framingConn) markLost()       { c.lost = true }

// take pops the verdict of r, the request the server now serves. It
// refuses r when it is not the request the scanner saw next (no verdict
// left, or another request line) and then stops the connection's checks
// for good. last reports that r is the last request the connection may
// serve: the scanner lost track after it.
func (c *framingConn) take(r *http.Request) (refused refusal, last bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.verdicts) == 0 {
		c.lost = true
		return refusedOutOfStep, true
	}
	v := c.verdicts[0]
	c.verdicts[0] = verdict{}
	if len(c.verdicts) == 1 {
		// Emptied in place, so that the queue keeps its array: sliced
		// off the front, it would need a new one for the verdict of each
		// request of the connection.
		c.verdicts = c.verdicts[:0]
	} else {
		c.verdicts = c.verdicts[1:]
	}
	if !isRequestLine(v.startLine, r) {
		c.verdicts, c.lost = nil, true
		return refusedOutOfStep, true
	}
	return v.refusal, c.lost && len(c.verdicts) == 0
}

// isRequestLine reports whether line is the request line of r, without
// building it.
func isRequestLine(line string, r *http.Request) bool {
	if len(line) != len(r.Method)+len(r.RequestURI)+len(r.Proto)+2 {
		return false
	}
	m, rest := line[:len(r.Method)], line[len(r.Method):]
	u, rest := rest[1:1+len(r.RequestURI)], rest[1+len(r.RequestURI):]
	return m == r.Method && rest[0] == ' ' && line[len(r.Method)] == ' ' && u == r.RequestURI && rest[1:] == r.Proto
}
