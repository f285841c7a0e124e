package edge

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// fastServer serves the HTTP/1.1 requests of a public listener that have
// no body itself, and hands a connection to net/http's server (srv) at its
// first request it does not serve: one with a body, an Expect or an
// Upgrade, HTTP/1.0, a head larger than its buffer, or one its parser
// refuses. net/http then serves that request, from the same bytes, and the
// rest of the connection; HTTP/2 connections go to it at once. The handler,
// the connection context, the timeouts and the error log are srv's.
//
// What a request costs less than under net/http's server: net/http keeps a
// goroutine reading under every request to see its client leave, a read
// that finds nothing and two deadline changes; here a request starts that
// watch only once it has run departureWatchAfter (most are answered
// before). One deadline change a request instead of four.
type fastServer struct {
	srv *http.Server

	closing atomic.Bool
	mu      sync.Mutex
	ln      net.Listener // nil until Serve
	handoff *handoffListener
	conns   map[*fastConn]struct{}
}

// departureWatchAfter is how long a request runs before its connection is
// watched for the client leaving (which cancels the request's context).
// A saturated core serves requests in tens of milliseconds (at 512
// connections, the harness's p50 is 30-40 ms), and at 20 ms nearly every
// request paid for a watch (a goroutine, a read that finds nothing, a
// wake-up at its end): the Redis gateway 8% of its CPU a request there
// (bench/README.md, "Main mode").
const departureWatchAfter = 250 * time.Millisecond

// fastHeadMax is the largest head the fast path reads; a larger one goes
// to net/http, whose bound is srv.MaxHeaderBytes.
const fastHeadMax = 4 << 10

// pendingMax is how much of a body of unknown length is held before the
// header goes out: a body that fits gets a Content-Length, a longer one is
// chunked (net/http's rule and size).
const pendingMax = 2 << 10

func newFastServer(srv *http.Server) *fastServer {
	return &fastServer{srv: srv, conns: map[*fastConn]struct{}{}}
}

// Serve accepts on ln until Shutdown or Close, and returns
// http.ErrServerClosed then, like http.Server.Serve.
func (f *fastServer) Serve(ln net.Listener) error {
	handoff := newHandoffListener(ln.Addr())
	f.mu.Lock()
	if f.closing.Load() {
		f.mu.Unlock()
		ln.Close()
		return http.ErrServerClosed
	}
	f.ln, f.handoff = ln, handoff
	f.mu.Unlock()
	served := make(chan error, 1)
	go func() { served <- f.srv.Serve(handoff) }()
	var pause time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if f.closing.Load() {
				<-served
				return http.ErrServerClosed
			}
			//lint:ignore SA1019 Temporary is what http.Server.Serve retries on too.
			if ne, ok := err.(net.Error); ok && ne.Temporary() {
				pause = min(max(2*pause, 5*time.Millisecond), time.Second)
				f.logf("http: Accept error: %v; retrying in %v", err, pause)
				time.Sleep(pause)
				continue
			}
			handoff.Close()
			<-served
			return err
		}
		pause = 0
		fc, ok := c.(*framingConn)
		if !ok {
			if !handoff.deliver(c) {
				c.Close()
			}
			continue
		}
		fast := newFastConn(f, fc)
		if !f.track(fast, true) {
			fc.Close()
			continue
		}
		go fast.serve()
	}
}

func (f *fastServer) logf(format string, args ...any) {
	if f.srv.ErrorLog != nil {
		f.srv.ErrorLog.Printf(format, args...)
	} else {
		log.Printf(format, args...)
	}
}

// track adds or removes c; false when adding after Shutdown or Close.
func (f *fastServer) track(c *fastConn, add bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !add {
		delete(f.conns, c)
		return true
	}
	if f.closing.Load() {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

// Shutdown stops accepting, closes the connections that wait for a
// request, lets those serving one finish it, and has srv shut down the
// connections it took over, all within ctx, like http.Server.Shutdown.
func (f *fastServer) Shutdown(ctx context.Context) error {
	f.stopAccepting()
	handed := make(chan error, 1)
	go func() { handed <- f.srv.Shutdown(ctx) }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !f.closeIdle() {
		select {
		case <-ctx.Done():
			<-handed
			return ctx.Err()
		case <-tick.C:
		}
	}
	return <-handed
}

// Close closes the listener and every connection at once, like
// http.Server.Close.
func (f *fastServer) Close() error {
	f.stopAccepting()
	err := f.srv.Close()
	f.mu.Lock()
	for c := range f.conns {
		c.state.Store(connClosed)
		c.fc.Close()
	}
	f.mu.Unlock()
	return err
}

func (f *fastServer) stopAccepting() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closing.Store(true)
	if f.ln != nil {
		f.ln.Close()
	}
}

// closeIdle closes the connections waiting for a request and reports
// whether none is left.
func (f *fastServer) closeIdle() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		if c.state.CompareAndSwap(connIdle, connClosed) {
			c.fc.Close()
		}
	}
	return len(f.conns) == 0
}

// The states of a fastConn.
const (
	connIdle   int32 = iota // waiting for a request
	connActive              // serving one
	connClosed              // closed by Shutdown or Close
)

// fastConn is one connection on the fast path.
type fastConn struct {
	f         *fastServer
	fc        *framingConn
	br        *bufio.Reader
	bw        *bufio.Writer
	state     atomic.Int32
	ctx       context.Context // the connection's, as srv's ConnContext made it
	remote    string
	served    bool // a request was served: the wait for the next is an idle one
	afterPost bool // the request served last was a POST
	w         fastResponse

	headReader *bytes.Reader // over the head in br, for the parser

	// The departure watch of the request being served.
	watch      *time.Timer
	watchMu    sync.Mutex
	watching   int // watchOff, watchArmed, watchReading
	watchEnded chan struct{}
	cancel     context.CancelFunc
}

const (
	watchOff = iota
	watchArmed
	watchReading
)

var (
	fastReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, fastHeadMax) }}
	fastWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4<<10) }}
)

func newFastConn(f *fastServer, fc *framingConn) *fastConn {
	c := &fastConn{f: f, fc: fc, remote: fc.RemoteAddr().String(), headReader: bytes.NewReader(nil)}
	c.br = fastReaders.Get().(*bufio.Reader)
	c.br.Reset(fc)
	c.bw = fastWriters.Get().(*bufio.Writer)
	c.bw.Reset(fc)
	c.w.c = c
	ctx := context.WithValue(context.Background(), http.ServerContextKey, f.srv)
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, fc.LocalAddr())
	if f.srv.ConnContext != nil {
		ctx = f.srv.ConnContext(ctx, fc)
	}
	c.ctx = ctx
	c.watch = time.AfterFunc(time.Hour, c.startWatch)
	c.watch.Stop()
	return c
}

// errHandOff is nextHead's word that the head is net/http's to read.
var errHandOff = errors.New("hand off")

func (c *fastConn) serve() {
	handedOff, hijacked := false, false
	defer func() {
		if err := recover(); err != nil && err != http.ErrAbortHandler {
			buf := make([]byte, 64<<10)
			buf = buf[:runtime.Stack(buf, false)]
			c.f.logf("http: panic serving %v: %v\n%s", c.remote, err, buf)
		}
		c.disarmWatch() // its read ends before c.br goes back to the pool
		c.f.track(c, false)
		if !handedOff && !hijacked {
			c.fc.Close()
		}
		if !hijacked {
			fastReaders.Put(c.br)
		}
		c.bw.Reset(nil)
		fastWriters.Put(c.bw)
	}()
	for {
		req, err := c.nextRequest()
		if err == errHandOff {
			handedOff = c.handOff()
			return
		}
		if err != nil {
			return
		}
		if !c.state.CompareAndSwap(connIdle, connActive) {
			return
		}
		last := c.serveRequest(req)
		if c.w.hijacked {
			hijacked = true
			return
		}
		if last || c.f.closing.Load() || !c.state.CompareAndSwap(connActive, connIdle) {
			return
		}
	}
}

// nextRequest waits for the next request and parses it when it is the
// fast path's: errHandOff when it is not.
func (c *fastConn) nextRequest() (*http.Request, error) {
	n, err := c.nextHead()
	if err != nil {
		return nil, err
	}
	head, _ := c.br.Peek(n)
	c.headReader.Reset(head)
	hr := fastReaders.Get().(*bufio.Reader)
	hr.Reset(c.headReader)
	req, err := http.ReadRequest(hr)
	whole := hr.Buffered() == 0 && c.headReader.Len() == 0
	hr.Reset(nil)
	fastReaders.Put(hr)
	if err != nil || !whole || !fastRequest(req, head) {
		return nil, errHandOff
	}
	c.br.Discard(n)
	c.afterPost = req.Method == http.MethodPost
	req.RemoteAddr = c.remote
	return req, nil
}

// nextHead waits until a whole request head is in c.br and returns its
// length; errHandOff when a head does not fit there.
func (c *fastConn) nextHead() (int, error) {
	// net/http waits for 4 bytes of a request after the first, under the
	// idle timeout, and closes without an answer when they do not come;
	// for the first, for a byte under the header timeout.
	least := 1
	if c.served {
		least = 4
	}
	if c.br.Buffered() < least {
		wait := c.f.srv.ReadHeaderTimeout
		if c.served && c.f.srv.IdleTimeout > 0 {
			wait = c.f.srv.IdleTimeout
		}
		if wait > 0 {
			c.fc.SetReadDeadline(time.Now().Add(wait))
		}
		if _, err := c.br.Peek(least); err != nil {
			return 0, err
		}
	}
	if c.afterPost {
		// net/http's tolerance of old clients: CR and LF after a POST,
		// among the next 4 bytes, are dropped.
		peek, _ := c.br.Peek(4)
		n := 0
		for n < len(peek) && (peek[n] == '\r' || peek[n] == '\n') {
			n++
		}
		c.br.Discard(n)
		c.afterPost = false
	}
	timed := false
	for {
		b, _ := c.br.Peek(c.br.Buffered())
		if n := headEnd(b); n > 0 {
			c.served = true
			return n, nil
		}
		if len(b) >= c.br.Size() {
			return 0, errHandOff
		}
		if !timed {
			// A head that came in parts: the header timeout from now.
			var deadline time.Time
			if d := c.f.srv.ReadHeaderTimeout; d > 0 {
				deadline = time.Now().Add(d)
			}
			c.fc.SetReadDeadline(deadline)
			timed = true
		}
		if _, err := c.br.Peek(len(b) + 1); err != nil {
			// Part of a head, then an end or a timeout: net/http answers
			// that as it does (a 400, say), from the same bytes.
			return 0, errHandOff
		}
	}
}

// headEnd is the length of the head at the start of b, up to and with the
// empty line that ends it (CRLF or a bare LF, as Go's parser reads lines);
// 0 when b holds no whole head.
func headEnd(b []byte) int {
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return 0
		}
		i += j + 1
		if i < len(b) && b[i] == '\n' {
			return i + 1
		}
		if i+1 < len(b) && b[i] == '\r' && b[i+1] == '\n' {
			return i + 2
		}
	}
}

// fastRequest reports whether the fast path serves req, parsed from head:
// HTTP/1.1, no body, nothing that changes the exchange (Expect, Upgrade),
// and a head net/http's server would take as it is (one valid Host line,
// valid field names, a target in origin form). Everything else goes to
// net/http, which answers it as it always has.
func fastRequest(req *http.Request, head []byte) bool {
	if req.ProtoMajor != 1 || req.ProtoMinor != 1 || req.Method == http.MethodConnect || req.Method == "PRI" || req.URL.Host != "" {
		return false
	}
	// The parser gives a request without a body (no Content-Length above
	// 0, no chunked coding) NoBody.
	if req.Body != http.NoBody {
		return false
	}
	h := req.Header
	if _, ok := h["Expect"]; ok {
		return false
	}
	if _, ok := h["Upgrade"]; ok {
		return false
	}
	// The parser moved the Host line's value to req.Host, and took the
	// first of several.
	if hostLines(head) != 1 || !httpguts.ValidHostHeader(req.Host) {
		return false
	}
	// Values the parser checked as net/http's server does; names it takes
	// with spaces in them.
	for k := range h {
		if !httpguts.ValidHeaderFieldName(k) {
			return false
		}
	}
	return true
}

// hostLines counts the Host lines of head, in any case.
func hostLines(head []byte) int {
	n := 0
	for len(head) > 0 {
		i := bytes.IndexByte(head, '\n')
		if i < 0 {
			break
		}
		head = head[i+1:]
		if len(head) >= 5 && head[4] == ':' && (head[0]|0x20) == 'h' && (head[1]|0x20) == 'o' && (head[2]|0x20) == 's' && (head[3]|0x20) == 't' {
			n++
		}
	}
	return n
}

// handOff gives the connection to net/http with what c.br holds, to be
// read again from its start; false when net/http is shutting down (the
// connection is then still c's to close).
func (c *fastConn) handOff() bool {
	buffered, _ := c.br.Peek(c.br.Buffered())
	c.fc.replay = bytes.Clone(buffered)
	c.fc.SetReadDeadline(time.Time{})
	return c.f.handoff.deliver(c.fc)
}

// serveRequest serves req and reports whether the connection closes after
// it.
func (c *fastConn) serveRequest(req *http.Request) (last bool) {
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	req = req.WithContext(ctx)
	w := &c.w
	w.reset(req)
	c.armWatch(cancel)
	c.f.srv.Handler.ServeHTTP(w, req)
	c.disarmWatch()
	if w.hijacked {
		return false
	}
	w.finish()
	flushed := c.bw.Flush() == nil
	return w.closeAfter || req.Close || !flushed
}

// armWatch starts the departure watch's timer for the request whose
// context cancel ends.
func (c *fastConn) armWatch(cancel context.CancelFunc) {
	c.watchMu.Lock()
	c.cancel, c.watching = cancel, watchArmed
	c.watchMu.Unlock()
	c.watch.Reset(departureWatchAfter)
}

// startWatch runs when a request has run departureWatchAfter: it reads
// until the client sends more (a pipelined request, kept in c.br) or the
// connection ends, which cancels the request, or disarmWatch stops it.
func (c *fastConn) startWatch() {
	c.watchMu.Lock()
	if c.watching != watchArmed {
		c.watchMu.Unlock()
		return
	}
	c.watching = watchReading
	ended := make(chan struct{})
	c.watchEnded = ended
	cancel := c.cancel
	// Under the lock: disarmWatch's past deadline comes after this one.
	c.fc.SetReadDeadline(time.Time{})
	c.watchMu.Unlock()
	defer close(ended)
	if c.br.Buffered() > 0 {
		return
	}
	// A timeout is disarmWatch's past deadline: the request ended first.
	if _, err := c.br.Peek(1); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		cancel()
	}
}

var longAgo = time.Unix(1, 0)

// disarmWatch stops the departure watch, and waits for its read to end if
// it started one.
func (c *fastConn) disarmWatch() {
	c.watch.Stop()
	c.watchMu.Lock()
	reading, ended := c.watching == watchReading, c.watchEnded
	c.watching, c.cancel, c.watchEnded = watchOff, nil, nil
	if reading {
		c.fc.SetReadDeadline(longAgo)
	}
	c.watchMu.Unlock()
	if reading {
		<-ended
	}
}

// handoffListener is the listener net/http's server serves: the
// connections the fast path hands over.
type handoffListener struct {
	addr     net.Addr
	conns    chan net.Conn
	closing  chan struct{}
	closeOne sync.Once
}

func newHandoffListener(addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, conns: make(chan net.Conn), closing: make(chan struct{})}
}

// deliver passes c to the server's next Accept; false when the listener
// closed first (c is then still the caller's).
func (l *handoffListener) deliver(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.closing:
		return false
	}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closing:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.closeOne.Do(func() { close(l.closing) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }
