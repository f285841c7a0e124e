package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"sync"

	"github.com/felixge/httpsnoop"
)

// capture records the status and body bytes of one response for the access
// log and the metrics. The wrapper keeps every optional interface of the
// server's ResponseWriter (Flusher, Hijacker, ReaderFrom, Unwrap): for the
// HTTP/1 server's writer it is the capture's own h1Writer, which costs no
// allocation; any other writer (HTTP/2's, a test's) goes through
// httpsnoop, whose hooks are built once per pooled capture, so that a
// request pays only for httpsnoop's own wrapper. A 101 is written on the
// hijacked connection, past WriteHeader: the hijack is what records it.
type capture struct {
	header  http.Header  // the server's, for the 1xx the upstream sends
	kept    []keptHeader // the gateway's headers across a 1xx
	code    int
	written int64
	final   bool    // a final status or body bytes went out
	tunnel  *tunnel // the client side of a 101's tunnel

	hooks httpsnoop.Hooks
	fw    forwardWriter // lent to the request's forwarding
	h1    h1Writer

	nextWriteHeader httpsnoop.WriteHeaderFunc
	nextWrite       httpsnoop.WriteFunc
	nextWriteString httpsnoop.WriteStringFunc
	nextReadFrom    httpsnoop.ReadFromFunc
	nextHijack      httpsnoop.HijackFunc

	writeHeader httpsnoop.WriteHeaderFunc
	write       httpsnoop.WriteFunc
	writeString httpsnoop.WriteStringFunc
	readFrom    httpsnoop.ReadFromFunc
	hijack      httpsnoop.HijackFunc
}

var captures = sync.Pool{New: func() any { return newCapture() }}

func newCapture() *capture {
	c := &capture{}
	c.h1.c = c
	c.writeHeader, c.write, c.writeString, c.readFrom, c.hijack = c.onWriteHeader, c.onWrite, c.onWriteString, c.onReadFrom, c.onHijack
	c.hooks = httpsnoop.Hooks{
		WriteHeader: func(next httpsnoop.WriteHeaderFunc) httpsnoop.WriteHeaderFunc {
			c.nextWriteHeader = next
			return c.writeHeader
		},
		Write: func(next httpsnoop.WriteFunc) httpsnoop.WriteFunc {
			c.nextWrite = next
			return c.write
		},
		WriteString: func(next httpsnoop.WriteStringFunc) httpsnoop.WriteStringFunc {
			c.nextWriteString = next
			return c.writeString
		},
		ReadFrom: func(next httpsnoop.ReadFromFunc) httpsnoop.ReadFromFunc {
			c.nextReadFrom = next
			return c.readFrom
		},
		Hijack: func(next httpsnoop.HijackFunc) httpsnoop.HijackFunc {
			c.nextHijack = next
			return c.hijack
		},
	}
	return c
}

// wrap starts a capture of w; release it with done once the response is
// complete and its figures read.
func (c *capture) wrap(w http.ResponseWriter) http.ResponseWriter {
	c.code, c.written, c.final = http.StatusOK, 0, false
	c.header = w.Header()
	if h1, ok := w.(h1ResponseWriter); ok {
		if _, push := w.(http.Pusher); !push {
			c.h1.w = h1
			return &c.h1
		}
	}
	return httpsnoop.Wrap(w, c.hooks)
}

// h1ResponseWriter is what the HTTP/1 server's ResponseWriter implements
// besides http.ResponseWriter (HTTP/2's is a Pusher and no Hijacker).
type h1ResponseWriter interface {
	http.ResponseWriter
	http.Flusher
	http.Hijacker
	io.ReaderFrom
	io.StringWriter
	//lint:ignore SA1019 the server's writer has it, and so does httpsnoop's wrapper.
	http.CloseNotifier
}

// h1Writer is a capture's wrapper of an h1ResponseWriter, with its
// interfaces and no others.
type h1Writer struct {
	c *capture
	w h1ResponseWriter
}

func (h *h1Writer) Header() http.Header { return h.w.Header() }

func (h *h1Writer) WriteHeader(code int) {
	h.c.headerGoing(code)
	h.w.WriteHeader(code)
	h.c.headerWent(code)
}

func (h *h1Writer) Write(p []byte) (int, error) {
	n, err := h.w.Write(p)
	h.c.wrote(int64(n))
	return n, err
}

func (h *h1Writer) WriteString(s string) (int, error) {
	n, err := h.w.WriteString(s)
	h.c.wrote(int64(n))
	return n, err
}

func (h *h1Writer) ReadFrom(src io.Reader) (int64, error) {
	n, err := h.w.ReadFrom(src)
	h.c.wrote(n)
	return n, err
}

func (h *h1Writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return h.c.hijacked(h.w.Hijack())
}

func (h *h1Writer) Flush() { h.w.Flush() }

func (h *h1Writer) CloseNotify() <-chan bool    { return h.w.CloseNotify() }
func (h *h1Writer) Unwrap() http.ResponseWriter { return h.w }

// result is the status and the bytes to log and count: for a tunnel,
// 101 and the bytes the upstream sent the client through it.
func (c *capture) result() (code int, written int64) {
	if c.tunnel != nil {
		return http.StatusSwitchingProtocols, c.tunnel.written.Load()
	}
	return c.code, c.written
}

func (c *capture) done() {
	c.nextWriteHeader, c.nextWrite, c.nextWriteString, c.nextReadFrom, c.nextHijack = nil, nil, nil, nil, nil
	c.fw = forwardWriter{}
	c.header, c.kept, c.tunnel = nil, nil, nil
	c.h1.w = nil
	captures.Put(c)
}

// onHijack hands ReverseProxy the client's connection of a 101 as a
// tunnel of the route: ReverseProxy hijacks only to switch protocols.
func (c *capture) onHijack() (net.Conn, *bufio.ReadWriter, error) {
	return c.hijacked(c.nextHijack())
}

func (c *capture) hijacked(conn net.Conn, brw *bufio.ReadWriter, err error) (net.Conn, *bufio.ReadWriter, error) {
	if err != nil || c.fw.route == nil {
		return conn, brw, err
	}
	c.tunnel = newTunnel(conn, c.fw.route.tunnels)
	c.final = true
	return c.tunnel, brw, nil
}

func (c *capture) onWriteHeader(code int) {
	c.headerGoing(code)
	c.nextWriteHeader(code)
	c.headerWent(code)
}

// headerGoing readies the header map for a status about to be written.
func (c *capture) headerGoing(code int) {
	interim := code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols
	if interim {
		// ReverseProxy relays an upstream's 103 (or other 1xx) with the
		// headers as they came, hop-by-hop ones included; they are the
		// upstream connection's, not the client's.
		removeHopByHop(c.header)
		// It then clears the whole header map, the gateway's own headers
		// with it: keep those for the final response. Rare, so the copy
		// is made only here.
		if c.kept == nil {
			for _, name := range gatewayHeaders {
				if v, ok := c.header[name]; ok {
					c.kept = append(c.kept, keptHeader{name, v})
				}
			}
		}
	} else if c.kept != nil {
		for _, k := range c.kept {
			c.header[k.name] = append(k.values, c.header[k.name]...)
		}
		c.kept = nil
	}
}

// headerWent records a status written.
func (c *capture) headerWent(code int) {
	// 1xx responses are interim; the status logged is the final one.
	if !c.final && (code < 100 || code > 199) {
		c.code, c.final = code, true
	}
}

func (c *capture) onWrite(p []byte) (int, error) {
	n, err := c.nextWrite(p)
	c.wrote(int64(n))
	return n, err
}

func (c *capture) onWriteString(s string) (int, error) {
	n, err := c.nextWriteString(s)
	c.wrote(int64(n))
	return n, err
}

func (c *capture) onReadFrom(src io.Reader) (int64, error) {
	n, err := c.nextReadFrom(src)
	c.wrote(n)
	return n, err
}

// wrote records n body bytes written.
func (c *capture) wrote(n int64) {
	c.written += n
	c.final = true
}

// connectionHeaders are the headers of one connection (RFC 9110 section 7.6.1),
// besides those the Connection header names.
var connectionHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHopByHop(h http.Header) {
	for _, v := range h["Connection"] {
		for name := range strings.SplitSeq(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range connectionHeaders {
		delete(h, name)
	}
}

// gatewayHeaders are the response headers the gateway sets before it
// forwards a request.
var gatewayHeaders = []string{"Ratelimit-Policy", "Ratelimit", "Strict-Transport-Security"}

type keptHeader struct {
	name   string
	values []string
}
