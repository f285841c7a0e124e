package edge

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Go's HTTP/1 server follows RFC 9112's rule for intermediaries when a
// request has both Content-Length and Transfer-Encoding: it drops the
// Content-Length and reads the chunked body, and the handler cannot tell.
// The gateway refuses such requests instead, like the RFC lets a server do,
// so it never forwards a message two parsers might frame differently. To see
// the header it scans each HTTP/1 connection's bytes as the server reads
// them, after TLS, and hands the handler one verdict per request.

// newFramingListener wraps a listener so that rejectConflictingFraming can
// judge each HTTP/1 request. With cfg set it terminates TLS itself: HTTP/2
// connections go to the server untouched (HTTP/2 has its own framing), and
// HTTP/1 ones are scanned, so the server sees them as plain connections;
// rejectConflictingFraming gives their requests back their TLS state.
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
	tc := tls.Server(c, l.cfg)
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

// connContext is the http.Server hook that lets rejectConflictingFraming
// find a request's connection.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*framingConn); ok {
		return context.WithValue(ctx, connKey{}, fc)
	}
	return ctx
}

var conflictingFraming = []byte(`{"type":"urn:edge-gateway:problem:conflicting-framing","title":"Conflicting message framing","status":400,"detail":"The request has both Content-Length and Transfer-Encoding."}`)

// rejectConflictingFraming answers 400, and closes the connection, for a
// request that carried both Content-Length and Transfer-Encoding; nothing
// of it reaches next. Requests over TLS that the listener decrypted get
// their TLS state back.
func rejectConflictingFraming(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fc, ok := r.Context().Value(connKey{}).(*framingConn)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		if fc.nextVerdict() {
			h := w.Header()
			h.Set("Content-Type", "application/problem+json")
			h.Set("Connection", "close")
			w.WriteHeader(http.StatusBadRequest)
			w.Write(conflictingFraming)
			return
		}
		if fc.tls != nil && r.TLS == nil {
			r.TLS = fc.tls
		}
		next.ServeHTTP(w, r)
	})
}

// framingConn scans the HTTP/1 request stream it carries: request heads,
// then bodies by Content-Length or chunked framing, the way the server
// reads them, and queues a verdict (true: both headers present) per head.
type framingConn struct {
	net.Conn
	tls *tls.ConnectionState

	mu       sync.Mutex
	verdicts []bool
	s        scanner
}

func (c *framingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.s.feed(p[:n], func(bad bool) { c.verdicts = append(c.verdicts, bad) })
		c.mu.Unlock()
	}
	return n, err
}

// nextVerdict pops the verdict of the request now being served. With none
// (the scanner gave up on a stream the server will refuse anyway) the
// request is not held against the framing rule.
func (c *framingConn) nextVerdict() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.verdicts) == 0 {
		return false
	}
	v := c.verdicts[0]
	c.verdicts = c.verdicts[1:]
	return v
}

type scanState uint8

const (
	inHead scanState = iota
	inBody
	inChunkSize
	inChunkData
	inChunkEnd
	inTrailer
	gaveUp // a stream the server refuses, or no longer HTTP/1 (upgraded)
)

// maxScanLine bounds a buffered line; a longer one is refused by the server.
const maxScanLine = 1 << 20

type scanner struct {
	state     scanState
	line      []byte
	remaining int64 // body or chunk bytes left
	sawStart  bool  // the request line of this head
	hasCL     bool
	hasTE     bool
	chunked   bool
	upgrade   bool
	clValue   string
}

func (s *scanner) feed(p []byte, verdict func(bad bool)) {
	for len(p) > 0 && s.state != gaveUp {
		switch s.state {
		case inBody, inChunkData:
			n := int64(len(p))
			if n > s.remaining {
				n = s.remaining
			}
			s.remaining -= n
			p = p[n:]
			if s.remaining == 0 {
				if s.state == inBody {
					s.state = inHead
				} else {
					s.state = inChunkEnd
				}
			}
			continue
		}
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.line = append(s.line, p...)
			if len(s.line) > maxScanLine {
				s.state = gaveUp
			}
			return
		}
		s.line = append(s.line, p[:i]...)
		p = p[i+1:]
		line := bytes.TrimSuffix(s.line, []byte("\r"))
		s.onLine(line, verdict)
		s.line = s.line[:0]
	}
}

func (s *scanner) onLine(line []byte, verdict func(bad bool)) {
	switch s.state {
	case inHead:
		if !s.sawStart {
			s.sawStart = len(line) > 0
			return
		}
		if len(line) > 0 {
			s.header(line)
			return
		}
		verdict(s.hasCL && s.hasTE)
		s.endHead()
	case inChunkSize:
		size := line
		if i := bytes.IndexByte(size, ';'); i >= 0 {
			size = size[:i]
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 64)
		switch {
		case err != nil || n < 0:
			s.state = gaveUp
		case n == 0:
			s.state = inTrailer
		default:
			s.state, s.remaining = inChunkData, n
		}
	case inChunkEnd:
		s.state = inChunkSize
	case inTrailer:
		if len(line) == 0 {
			s.reset()
		}
	}
}

func (s *scanner) header(line []byte) {
	name, value, ok := bytes.Cut(line, []byte(":"))
	if !ok {
		return
	}
	value = bytes.TrimSpace(value)
	switch {
	case bytes.EqualFold(name, []byte("Content-Length")):
		s.hasCL = true
		s.clValue = string(value)
	case bytes.EqualFold(name, []byte("Transfer-Encoding")):
		s.hasTE = true
		codings := bytes.Split(value, []byte(","))
		s.chunked = bytes.EqualFold(bytes.TrimSpace(codings[len(codings)-1]), []byte("chunked"))
	case bytes.EqualFold(name, []byte("Upgrade")):
		s.upgrade = true
	}
}

// endHead moves to the body the way the server frames it: Transfer-Encoding
// wins over Content-Length.
func (s *scanner) endHead() {
	switch {
	case s.upgrade:
		s.state = gaveUp
	case s.hasTE && s.chunked:
		s.reset()
		s.state = inChunkSize
	case s.hasTE:
		s.state = gaveUp // the server answers 501 and closes
	case s.hasCL:
		n, err := strconv.ParseInt(s.clValue, 10, 64)
		s.reset()
		if err != nil || n < 0 {
			s.state = gaveUp
		} else if n > 0 {
			s.state, s.remaining = inBody, n
		}
	default:
		s.reset()
	}
}

func (s *scanner) reset() {
	*s = scanner{line: s.line[:0]}
}
