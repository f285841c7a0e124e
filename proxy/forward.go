package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"time"

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
// otherwise allocate, 32 KiB at a time, for every request.
var copyBuffers = &bufferPool{pool: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}}

type bufferPool struct{ pool sync.Pool }

func (p *bufferPool) Get() []byte  { return *p.pool.Get().(*[]byte) }
func (p *bufferPool) Put(b []byte) { p.pool.Put(&b) }

// newForwarder builds the ReverseProxy of one route. It uses Rewrite, not
// Director: hop-by-hop headers and the client's forwarding headers are gone
// before Rewrite runs, so a client cannot strip what the gateway adds. What
// the upstream may believe about the client is the resolver's to say.
func newForwarder(rt *route, resolver *subject.Resolver, transport http.RoundTripper, logger *slog.Logger, underscores bool) http.Handler {
	target := rt.Upstream
	var modifyResponse func(*http.Response) error
	if !rt.responseRules.empty() {
		rules := &rt.responseRules
		modifyResponse = func(res *http.Response) error {
			rules.apply(res.Header)
			return nil
		}
	}
	return &httputil.ReverseProxy{
		ModifyResponse: modifyResponse,
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
			resolver.SetForwarded(pr)
			rt.requestRules.apply(pr.Out.Header)
			if rt.HostHeader != "" {
				pr.Out.Host = rt.HostHeader
			}
		},
		Transport:     transport,
		BufferPool:    copyBuffers,
		FlushInterval: 100 * time.Millisecond,
		ErrorLog:      slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				// The client went away; nobody is left to answer.
				return
			}
			var maxBytes *http.MaxBytesError
			var netErr net.Error
			var bodyErr *clientBodyError
			switch {
			case errors.As(err, &maxBytes):
				writeProblem(w, problemTooLarge)
			case errors.As(err, &bodyErr):
				// The client broke its own body (a malformed chunk): its
				// fault, not the upstream's.
				logger.LogAttrs(r.Context(), slog.LevelInfo, "client sent a malformed body", slog.String("route", rt.OperationID), slog.String("error", bodyErr.Error()))
				writeProblem(w, problemBadBody)
			case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout():
				logger.LogAttrs(r.Context(), slog.LevelWarn, "upstream timed out", slog.String("route", rt.OperationID), slog.String("error", err.Error()))
				writeProblem(w, problemUpstreamTimeout)
			default:
				logger.LogAttrs(r.Context(), slog.LevelWarn, "upstream failed", slog.String("route", rt.OperationID), slog.String("error", err.Error()))
				writeProblem(w, problemUpstreamFailed)
			}
		},
	}
}

// clientBody marks the errors of reading the request body as the
// client's, so that a body the client broke is answered 400 and logged as
// its fault, not 502 as the upstream's: the transport hands a body's read
// error back as it got it.
type clientBody struct{ io.ReadCloser }

// clientBodyError is a failure to read the client's body.
type clientBodyError struct{ err error }

func (e *clientBodyError) Error() string { return e.err.Error() }
func (e *clientBodyError) Unwrap() error { return e.err }

func (b clientBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		err = &clientBodyError{err}
	}
	return n, err
}
