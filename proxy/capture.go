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
// log and the metrics. httpsnoop keeps every optional interface of the
// server's ResponseWriter (Flusher, Hijacker, ReaderFrom, Unwrap) on the
// wrapper; the hooks it calls are built once per pooled capture, so that a
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
	return httpsnoop.Wrap(w, c.hooks)
}

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
	captures.Put(c)
}

// onHijack hands ReverseProxy the client's connection of a 101 as a
// tunnel of the route: ReverseProxy hijacks only to switch protocols.
func (c *capture) onHijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := c.nextHijack()
	if err != nil || c.fw.route == nil {
		return conn, brw, err
	}
	c.tunnel = newTunnel(conn, c.fw.route.tunnels)
	c.final = true
	return c.tunnel, brw, nil
}

func (c *capture) onWriteHeader(code int) {
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
	c.nextWriteHeader(code)
	// 1xx responses are interim; the status logged is the final one.
	if !c.final && (code < 100 || code > 199) {
		c.code, c.final = code, true
	}
}

func (c *capture) onWrite(p []byte) (int, error) {
	n, err := c.nextWrite(p)
	c.written += int64(n)
	c.final = true
	return n, err
}

func (c *capture) onWriteString(s string) (int, error) {
	n, err := c.nextWriteString(s)
	c.written += int64(n)
	c.final = true
	return n, err
}

func (c *capture) onReadFrom(src io.Reader) (int64, error) {
	n, err := c.nextReadFrom(src)
	c.written += n
	c.final = true
	return n, err
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
