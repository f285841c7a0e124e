package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgegate/gateway/edge"
	"github.com/edgegate/gateway/subject"
)

// newTransport is the transport shared by every route: a pool of idle
// connections per upstream, bounded dial and response-header waits, and
// never a proxy from the environment.
func newTransport() *http.Transport {
	return &http.Transport{
		Proxy: nil,
		DialContext: (&net.Dialer{
			Timeout:   5 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2: true,
		// As many idle connections per upstream as a busy listener has
		// clients: fewer, and a gateway under load dials anew for a share
		// of its requests (the load harness saw a third at 512 clients).
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// copyBuffers lends ReverseProxy its body copy buffers, which it would
// otherwise allocate, 32 KiB at a time, for every request. The pool holds
// array pointers, which a returned slice converts back to without an
// allocation.
var copyBuffers = &bufferPool{pool: sync.Pool{New: func() any { return new(copyBuffer) }}}

type copyBuffer = [32 << 10]byte

type bufferPool struct{ pool sync.Pool }

func (p *bufferPool) Get() []byte { return p.pool.Get().(*copyBuffer)[:] }

func (p *bufferPool) Put(b []byte) {
	if len(b) == len(copyBuffer{}) {
		p.pool.Put((*copyBuffer)(b))
	}
}

// noUserAgent is the User-Agent of a request that came without one: the
// empty value, which the transports do not send. It is shared by every
// request (a header map's values are replaced or appended to, never
// written in place).
var noUserAgent = []string{""}

// teTrailers is the TE of a request to an upstream that may send a cost
// trailer, shared as noUserAgent is.
var teTrailers = []string{"trailers"}

// newForwarder builds the ReverseProxy of one route. It uses Rewrite, not
// Director: hop-by-hop headers and the client's forwarding headers are gone
// before Rewrite runs, so a client cannot strip what the gateway adds. What
// the upstream may believe about the client is the resolver's to say
// (subject.Inbound.Believe, before the request is forwarded).
//
// Only the upgrades the route lists are forwarded as upgrades, and only
// their 101 opens a tunnel, which closes after rt.tunnels.idle without a
// byte.
func newForwarder(rt *route, target *url.URL, transport http.RoundTripper, logger *slog.Logger, underscores bool) http.Handler {
	upgrades := rt.Upgrades
	rules := &rt.responseRules
	noRules := rules.empty()
	tracing := rt.tracing
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// SetURL joins the target's path with the inbound one; the
			// inbound one is already the normalized, matched path.
			pr.SetURL(target)
			if !underscores {
				for name := range pr.Out.Header {
					if strings.IndexByte(name, '_') >= 0 {
						delete(pr.Out.Header, name)
					}
				}
			}
			subject.SetForwarded(pr)
			rt.requestRules.apply(pr.Out.Header)
			// Last, so that no header rule can bring an upgrade back.
			restrictUpgrade(pr.Out.Header, upgrades)
			if rt.HostHeader != "" {
				pr.Out.Host = rt.HostHeader
			}
			if tracing != nil {
				tracing.inject(pr.Out.Context(), pr.Out.Header)
			}
			if rt.asksTrailers {
				// A cost may come as a trailer, whatever the client said.
				pr.Out.Header["Te"] = teTrailers
			}
			// A request without a User-Agent goes without one, as
			// ReverseProxy would have it go; set here, the empty value
			// costs neither ReverseProxy's allocation nor its
			// canonicalisation of the name.
			if _, ok := pr.Out.Header["User-Agent"]; !ok {
				pr.Out.Header["User-Agent"] = noUserAgent
			}
		},
		ModifyResponse: func(res *http.Response) error {
			if tracing != nil {
				upstreamAnswered(res)
			}
			if res.StatusCode == http.StatusSwitchingProtocols {
				if err := checkSwitch(res, upgrades); err != nil {
					return err
				}
			}
			// An upstream's Alt-Svc names its own alternatives, which a
			// client would take for the gateway's; the gateway sets its
			// own (listen.http3).
			delete(res.Header, "Alt-Svc")
			if !noRules {
				rules.apply(res.Header)
			}
			if rt.asksTrailers && res.Body != http.NoBody && res.StatusCode != http.StatusSwitchingProtocols && mayTrail(res) {
				if s := readingOn(res); s != nil {
					res.Body = &trailerBody{ReadCloser: res.Body, res: res, s: s}
				}
			}
			return nil
		},
		Transport:  transport,
		BufferPool: copyBuffers,
		// No periodic flush: it costs a timer per response. A body of
		// unknown length and an event stream are flushed as each write
		// comes (ReverseProxy's rule); one of known length goes out as
		// the server's buffer fills and at its end.
		FlushInterval: 0,
		ErrorLog:      edge.NewErrorLog(logger),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if clientGone(w, r) {
				// The client went away, or stopped sending its body (which
				// serve answers); nobody is left to answer here.
				return
			}
			var maxBytes *http.MaxBytesError
			var netErr net.Error
			var bodyErr *clientBodyError
			// unmeasured: the exchange's time is not the pool's (the
			// client's fault, or a target that refused the connection);
			// failed: the pool's failure, a sample only when slow.
			unmeasured, failed := true, false
			switch {
			case errors.As(err, &maxBytes):
				writeProblem(w, problemTooLarge)
			case errors.As(err, &bodyErr) && errors.Is(err, os.ErrDeadlineExceeded):
				// HTTP/2 keeps the request alive past a body timeout, so
				// the answer is written here, not in serve.
				writeBodyTimeout(w, r, logger, rt.OperationID)
			case errors.As(err, &bodyErr):
				// The client broke its own body (a malformed chunk): its
				// fault, not the upstream's.
				logger.LogAttrs(r.Context(), slog.LevelInfo, "client sent a malformed body", slog.String("route", rt.OperationID), slog.String("error", edge.RedactAddresses(bodyErr.Error())))
				writeProblem(w, problemBadBody)
			case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout():
				// A connect timeout included: a backend whose accept queue
				// is full drops connections.
				unmeasured = false
				logger.LogAttrs(r.Context(), slog.LevelWarn, "upstream timed out", slog.String("route", rt.OperationID), slog.String("error", err.Error()))
				writeProblem(w, problemUpstreamTimeout)
			case errors.Is(err, errUnrequestedUpgrade):
				unmeasured, failed = false, true
				logger.LogAttrs(r.Context(), slog.LevelWarn, "upstream switched protocols unasked", slog.String("route", rt.OperationID))
				writeProblem(w, problemUpstreamFailed)
			default:
				var dialErr *dialError
				unmeasured = errors.As(err, &dialErr)
				failed = !unmeasured
				logger.LogAttrs(r.Context(), slog.LevelWarn, "upstream failed", slog.String("route", rt.OperationID), slog.String("error", err.Error()))
				writeProblem(w, problemUpstreamFailed)
			}
			if fw, ok := w.(*forwardWriter); ok {
				fw.unmeasured, fw.failed = unmeasured, failed
			}
		},
	}
}

// clientGone reports whether the client of r, a request forwarded
// through w, went away: by its own context, which on a route that reads
// on to a cost trailer is not r's (forwardWriter.client).
func clientGone(w http.ResponseWriter, r *http.Request) bool {
	if fw, ok := w.(*forwardWriter); ok && fw.client != nil {
		return fw.client.Err() != nil
	}
	return r.Context().Err() != nil
}

// clientBody marks the errors of reading the request body as the
// client's, so that a body the client broke is answered 400 and logged as
// its fault, not 502 as the upstream's: the transport hands a body's read
// error back as it got it. Each read may wait for the client at most
// timeout (body_read_timeout): the connection's read deadline is moved
// before each read and cleared at the end of the body, so a slow upstream
// is never taken for a slow client.
//
// A body read to its end stays at its end: the transport reads once more
// after the declared length, and the server closes the body when the
// response's head is written, which the upstream may have sent already; a
// read of the closed body would fail the request's write, and the
// transport would close the upstream connection under the response
// (golang/go#40747).
type clientBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	timeout  time.Duration
	timedOut atomic.Bool
	ended    bool
}

// clientBodyError is a failure to read the client's body.
type clientBodyError struct{ err error }

func (e *clientBodyError) Error() string { return e.err.Error() }
func (e *clientBodyError) Unwrap() error { return e.err }

func (b *clientBody) Read(p []byte) (int, error) {
	if b.ended {
		return 0, io.EOF
	}
	b.rc.SetReadDeadline(time.Now().Add(b.timeout))
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.ended = true
		b.rc.SetReadDeadline(time.Time{})
	}
	if err != nil && err != io.EOF {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			b.timedOut.Store(true)
		}
		err = &clientBodyError{err}
	}
	return n, err
}

// writeBodyTimeout answers a client that sent no body byte for
// body_read_timeout: 408, and the connection closes.
func writeBodyTimeout(w http.ResponseWriter, r *http.Request, logger *slog.Logger, route string) {
	logger.LogAttrs(r.Context(), slog.LevelInfo, "client body timed out", slog.String("route", route))
	w.Header()["Connection"] = headerClose
	writeProblem(w, problemBodyTimeout)
}
