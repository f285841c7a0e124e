package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"os"
	"sync"
	"time"
)

// poolTransport is the transport a pool owns: plain-HTTP requests without
// a body go over leanTransport, everything else over the standard
// Transport (see leanCarries for why).
type poolTransport struct {
	std  *http.Transport
	lean *leanTransport // nil where the idle check cannot be made
}

// leanCarries reports whether req goes over the lean transport. The rest
// goes over the standard Transport:
//   - https: HTTP/2 and ALPN are the standard Transport's;
//   - a request with a body: the body must be written while the response
//     is read (an upstream may answer, 413 or 401, before it has read the
//     whole body, and Expect: 100-continue waits for an answer before the
//     body goes), which takes the second goroutine that the lean transport
//     exists to save;
//   - an upgrade: its 101 hands the connection over to a tunnel;
//   - CONNECT.
func (t *poolTransport) leanCarries(req *http.Request) bool {
	if t.lean == nil || req.URL.Scheme != "http" || (req.Body != nil && req.Body != http.NoBody) || req.Method == http.MethodConnect {
		return false
	}
	_, upgrade := req.Header["Upgrade"]
	return !upgrade
}

func (t *poolTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.leanCarries(req) {
		return t.lean.RoundTrip(req)
	}
	return t.std.RoundTrip(req)
}

func (t *poolTransport) CloseIdleConnections() {
	t.std.CloseIdleConnections()
	if t.lean != nil {
		t.lean.CloseIdleConnections()
	}
}

// leanTransport is an HTTP/1.1 client transport for requests without a
// body: the request is written and the response head read on the caller's
// goroutine, over a pooled connection, with the standard library's request
// writer and response reader (so the framing is the standard Transport's).
// The standard Transport hands every request to a write goroutine and
// every response from a read goroutine per connection, and arms a timer
// per request for the response header timeout; this one does neither: the
// response header timeout is the socket's deadline, and the request's
// context ending ends the exchange (see watchAfter).
//
// It never sends a request twice: a request that fails on a connection is
// not resent; an idle connection is checked before it is used (the
// upstream may have closed it, or sent bytes nobody asked for), and one
// that fails the check is closed before anything is written to it.
//
// Unlike the standard Transport it asks for no compression on the
// client's behalf: the upstream's response goes to the client as it came.
type leanTransport struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// responseTimeout bounds the write of the request and the wait for
	// the response head.
	responseTimeout time.Duration
	idleTimeout     time.Duration
	maxIdlePerHost  int
	// watchAfter: the request's context is looked at when the socket's
	// deadline, at most watchAfter from the start (see arm), cuts a read
	// or write short,
	// and an exchange that goes on past it has the context's end close
	// the connection (context.AfterFunc). Most exchanges are over sooner,
	// and cost no registration with the context (about 1 µs and 4
	// allocations a request); a client that leaves in that time has its
	// connection closed at watchAfter at the latest, and a connection
	// whose request's context has ended never goes back to the pool.
	watchAfter time.Duration
	// checkIdleAfter: a connection idle for less is taken without the
	// idle check (a syscall, 4% of the gateway's CPU at 512 clients). An
	// upstream's close that came within that time is missed, as the
	// standard Transport misses one its read goroutine has not yet been
	// scheduled to see (on a busy proxy, milliseconds too).
	checkIdleAfter time.Duration

	mu   sync.Mutex
	idle map[string]*idleConns // by the request URL's host
	// closeIdle closes connections that come back until the next request
	// takes one, as the standard Transport does after
	// CloseIdleConnections.
	closeIdle bool
	sweep     *time.Timer // closes connections idle for idleTimeout; nil until the first
	sweeping  bool        // sweep is armed
}

// idleConns are one host's idle connections, the longest idle first.
type idleConns struct{ conns []*leanConn }

// maxResponseHeadBytes bounds a response head, as the standard Transport's
// default does.
const maxResponseHeadBytes = 10 << 20

func newLeanTransport(dial func(ctx context.Context, network, addr string) (net.Conn, error), std *http.Transport) *leanTransport {
	return &leanTransport{
		dial:            dial,
		responseTimeout: std.ResponseHeaderTimeout,
		idleTimeout:     std.IdleConnTimeout,
		maxIdlePerHost:  std.MaxIdleConnsPerHost,
		watchAfter:      100 * time.Millisecond,
		checkIdleAfter:  time.Millisecond,
		idle:            map[string]*idleConns{},
	}
}

// leanConn is one upstream connection of a leanTransport.
type leanConn struct {
	t    *leanTransport
	host string // the key of its idle list
	conn net.Conn
	br   *bufio.Reader // reads through the leanConn, for the head's limit
	bw   *bufio.Writer
	// out is the request's last piece, held by Write while holdLast is
	// set (bw's buffer, left alone until the next request): the answer's
	// first read sends it (sendRead).
	out      []byte
	holdLast bool
	// headRoom is what the response head may still read; MaxInt64 once
	// the head is read.
	headRoom int64
	idleAt   time.Time
	abort    func() // closes conn; made once, for context.AfterFunc
	rawConn

	// The exchange under way, for the watch (leanTransport.watchAfter):
	// ctx is its request's; deadline the socket's once the watch is
	// handed to the context (the response head's; zero for the body);
	// sliced says that the socket's deadline now is the watch's, whose
	// end looks at ctx; stop is context.AfterFunc's once ctx is watched
	// that way, nil before.
	ctx      context.Context
	deadline time.Time
	sliced   bool
	stop     func() bool
	// watchEnd is the socket's deadline while it is a watch's, kept from
	// one exchange to the next (see arm); zero while it is not.
	watchEnd time.Time
}

// Read is the connection as the response reader sees it: a head larger
// than maxResponseHeadBytes fails.
func (c *leanConn) Read(p []byte) (int, error) {
	if c.headRoom <= 0 {
		return 0, fmt.Errorf("proxy: upstream response head exceeded %d bytes", maxResponseHeadBytes)
	}
	if int64(len(p)) > c.headRoom {
		p = p[:c.headRoom]
	}
	var n int
	var err error
	if len(c.out) > 0 {
		n, err = c.sendRead(p)
	} else {
		n, err = c.conn.Read(p)
	}
	for n == 0 && err != nil && c.sliced && errors.Is(err, os.ErrDeadlineExceeded) {
		if err = c.watch(); err != nil {
			return 0, err
		}
		n, err = c.conn.Read(p)
	}
	if c.headRoom != math.MaxInt64 {
		c.headRoom -= int64(n)
	}
	return n, err
}

// Write is the connection as the request writer sees it: the watch's
// deadline does not cut a request short, and the last piece is held for
// sendRead.
func (c *leanConn) Write(p []byte) (int, error) {
	if c.holdLast {
		c.out = p
		return len(p), nil
	}
	return c.write(p)
}

func (c *leanConn) write(p []byte) (int, error) {
	n, err := c.conn.Write(p)
	for err != nil && c.sliced && errors.Is(err, os.ErrDeadlineExceeded) {
		if err = c.watch(); err != nil {
			return n, err
		}
		var more int
		more, err = c.conn.Write(p[n:])
		n += more
	}
	return n, err
}

// watch is the end of the watch's deadline: an error if the request's
// context has ended; else the context's end closes the connection from
// now on, and the socket's deadline is c.deadline.
func (c *leanConn) watch() error {
	c.sliced = false
	if c.ctx.Err() != nil {
		return fmt.Errorf("proxy: upstream request ended: %w", context.Cause(c.ctx))
	}
	c.stop = context.AfterFunc(c.ctx, c.abort)
	c.conn.SetDeadline(c.deadline)
	c.watchEnd = time.Time{}
	return nil
}

// arm sets the socket's deadline for an exchange that starts at now:
// deadline, a watch's if watch says so. A watch's deadline that the last
// exchange left is kept while it is watchAfter/2 away or more, so that
// the watch of an exchange on a busy connection ends between watchAfter/2
// and watchAfter after its start, for a deadline call every watchAfter/2
// instead of one a request (120 ns, the clock read in it included).
func (c *leanConn) arm(now, deadline time.Time, watch bool) {
	if watch && !c.watchEnd.IsZero() && c.watchEnd.Sub(now) >= c.t.watchAfter/2 {
		return
	}
	c.conn.SetDeadline(deadline)
	c.watchEnd = time.Time{}
	if watch {
		c.watchEnd = deadline
	}
}

func (t *leanTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("proxy: upstream request ended: %w", context.Cause(ctx))
	}
	now := time.Now()
	deadline := now.Add(t.responseTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	// The socket's deadline is the watch's, unless the head's comes first
	// (then the context is looked at when that one ends the wait).
	armed, sliced := deadline, false
	if w := now.Add(t.watchAfter); w.Before(deadline) {
		armed, sliced = w, true
	}
	c, err := t.get(ctx, req.URL, now, armed, sliced)
	if err != nil {
		return nil, err
	}
	c.ctx, c.deadline, c.sliced = ctx, deadline, sliced
	res, err := c.exchange(req)
	if err != nil {
		c.end()
		c.conn.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("proxy: upstream request ended: %w", context.Cause(ctx))
		}
		return nil, err
	}
	// The response header timeout is over; the body may take its time, as
	// it may with the standard Transport: under the watch's deadline if
	// it still runs (its end hands the watch to the context and leaves no
	// deadline), else none. A body read already needs no more of the
	// connection, which keeps its deadline until the next request sets
	// one (one deadline call a request instead of two).
	if res.Body != http.NoBody && (res.ContentLength < 0 || int64(c.br.Buffered()) < res.ContentLength) {
		c.deadline = time.Time{}
		if c.stop != nil {
			c.conn.SetDeadline(time.Time{})
		} else {
			c.sliced = true
		}
	}
	reuse := !res.Close && !req.Close && res.StatusCode != http.StatusSwitchingProtocols
	if res.Body == http.NoBody {
		c.release(reuse)
		return res, nil
	}
	res.Body = &leanBody{conn: c, body: res.Body, reuse: reuse}
	return res, nil
}

// exchange writes req and reads the response head, relaying each 1xx
// before it to the request's client trace (ReverseProxy forwards them from
// there).
func (c *leanConn) exchange(req *http.Request) (*http.Response, error) {
	if err := req.Write(c.bw); err != nil {
		return nil, err
	}
	c.holdLast = true
	err := c.bw.Flush()
	c.holdLast = false
	if err != nil {
		return nil, err
	}
	trace := httptrace.ContextClientTrace(req.Context())
	c.headRoom = maxResponseHeadBytes
	defer c.exchanged()
	for {
		res, err := http.ReadResponse(c.br, req)
		if err != nil {
			return nil, err
		}
		code := res.StatusCode
		if code < 100 || code > 199 || code == http.StatusSwitchingProtocols {
			return res, nil
		}
		if trace != nil && trace.Got1xxResponse != nil {
			if err := trace.Got1xxResponse(code, textproto.MIMEHeader(res.Header)); err != nil {
				return nil, err
			}
			// The 1xx went to the client, which bounds them; the limit
			// is on each head, as it is in the standard Transport.
			c.headRoom = maxResponseHeadBytes
		}
	}
}

// exchanged ends an exchange's use of the connection's buffers.
func (c *leanConn) exchanged() {
	c.headRoom = math.MaxInt64
	c.out = nil
}

// writeThenRead sends out as any write, then reads into p: sendRead
// where it cannot send with the read.
func (c *leanConn) writeThenRead(out, p []byte) (int, error) {
	if _, err := c.write(out); err != nil {
		return 0, err
	}
	return c.conn.Read(p)
}

// end ends the watch of the exchange's context, and reports whether the
// connection is still the exchange's: not closed by the context's end
// (context.AfterFunc's) nor wanted by a context that has ended.
func (c *leanConn) end() bool {
	stopped := c.stop == nil || c.stop()
	ended := c.ctx.Err() != nil
	c.ctx, c.stop, c.sliced = nil, nil, false
	return stopped && !ended
}

// release ends the connection's exchange: back to the idle pool when
// reuse says it may go, nothing is left unread and the request's context
// has not ended; closed otherwise.
func (c *leanConn) release(reuse bool) {
	if !c.end() || !reuse || c.br.Buffered() > 0 {
		c.conn.Close()
		return
	}
	c.t.put(c)
}

// leanBody is a response body of a leanTransport: at its end the
// connection goes back to the pool; closed before its end, or broken, the
// connection closes.
type leanBody struct {
	conn  *leanConn
	body  io.ReadCloser
	reuse bool
	err   error // once the body ended: io.EOF or what broke it
}

func (b *leanBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.body.Read(p)
	if err != nil {
		b.err = err
		b.conn.release(b.reuse && err == io.EOF)
	}
	return n, err
}

// Close closes the connection unless the body was read to its end. It
// does not close the reader of the body, which would read the rest.
func (b *leanBody) Close() error {
	if b.err == nil {
		b.err = errors.New("proxy: read on a closed upstream response body")
		b.conn.release(false)
	}
	return nil
}

// get returns an idle connection to u's host that passes the idle check,
// the one idle the shortest first, or dials one, armed with deadline (a
// watch's if watch says so).
func (t *leanTransport) get(ctx context.Context, u *url.URL, now, deadline time.Time, watch bool) (*leanConn, error) {
	t.mu.Lock()
	t.closeIdle = false
	if l := t.idle[u.Host]; l != nil {
		for len(l.conns) > 0 {
			c := l.conns[len(l.conns)-1]
			l.conns[len(l.conns)-1] = nil
			l.conns = l.conns[:len(l.conns)-1]
			t.mu.Unlock()
			// Before the check, which fails on an expired deadline: the
			// last request's may be left on the connection.
			c.arm(now, deadline, watch)
			if now.Sub(c.idleAt) < t.checkIdleAfter || c.usable() {
				return c, nil
			}
			c.conn.Close()
			t.mu.Lock()
		}
	}
	t.mu.Unlock()
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	nc, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &leanConn{t: t, host: u.Host, conn: nc, headRoom: math.MaxInt64}
	c.br = bufio.NewReader(c)
	c.bw = bufio.NewWriter(c)
	c.abort = func() { nc.Close() }
	c.initRaw(nc)
	c.arm(now, deadline, watch)
	return c, nil
}

// put keeps c idle, unless its host has maxIdlePerHost idle already or
// idle connections are being closed.
func (t *leanTransport) put(c *leanConn) {
	c.idleAt = time.Now()
	t.mu.Lock()
	l := t.idle[c.host]
	if l == nil {
		l = &idleConns{}
		t.idle[c.host] = l
	}
	if t.closeIdle || len(l.conns) >= t.maxIdlePerHost {
		t.mu.Unlock()
		c.conn.Close()
		return
	}
	l.conns = append(l.conns, c)
	if !t.sweeping {
		t.sweeping = true
		if t.sweep == nil {
			t.sweep = time.AfterFunc(t.idleTimeout, t.closeExpired)
		} else {
			t.sweep.Reset(t.idleTimeout)
		}
	}
	t.mu.Unlock()
}

// closeExpired closes the connections idle for idleTimeout, and runs
// again when the next of the rest will be: one timer for the transport,
// armed while any connection is idle, instead of one per connection.
func (t *leanTransport) closeExpired() {
	now := time.Now()
	var expired []*leanConn
	t.mu.Lock()
	next := time.Duration(-1)
	for host, l := range t.idle {
		n := 0
		for n < len(l.conns) && now.Sub(l.conns[n].idleAt) >= t.idleTimeout {
			n++
		}
		expired = append(expired, l.conns[:n]...)
		rest := copy(l.conns, l.conns[n:])
		clear(l.conns[rest:])
		l.conns = l.conns[:rest]
		if rest == 0 {
			delete(t.idle, host)
			continue
		}
		if wait := t.idleTimeout - now.Sub(l.conns[0].idleAt); next < 0 || wait < next {
			next = wait
		}
	}
	t.sweeping = next >= 0
	if t.sweeping {
		t.sweep.Reset(next)
	}
	t.mu.Unlock()
	for _, c := range expired {
		c.conn.Close()
	}
}

// CloseIdleConnections closes the idle connections, and those that come
// back before the next request takes one.
func (t *leanTransport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = map[string]*idleConns{}
	t.closeIdle = true
	if t.sweep != nil {
		t.sweep.Stop()
	}
	t.sweeping = false
	t.mu.Unlock()
	for _, l := range idle {
		for _, c := range l.conns {
			c.conn.Close()
		}
	}
}
