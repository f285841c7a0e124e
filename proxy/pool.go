package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// pool is a Pool compiled: its members in file order, the transport they
// share, and the round-robin position. Requests that started on an older
// configuration finish on its pool; the health of each target lives in a
// targetState that the new pool takes over.
type pool struct {
	Pool
	members   []*member
	transport http.RoundTripper
	owned     *poolTransport // the transport, when the pool built it
	next      atomic.Uint64
	logger    *slog.Logger
	duration  prometheus.Observer // gateway_upstream_duration_seconds; nil without metrics
	ejecting  sync.Mutex          // one ejection decided at a time
	// overload is the pool's limit and queue (nil without an overload
	// block); a reload that keeps the block keeps the controller.
	overload *overloadGate
}

// targetState is what the gateway knows of one target's health. A reload
// that keeps the target in its pool keeps this state.
type targetState struct {
	fails        atomic.Int64 // failures in a row; a response resets it
	ejectedUntil atomic.Int64 // unix nanoseconds; 0: not ejected for failures
	down         atomic.Bool  // failed its active check, not passed twice since
	passes       atomic.Int64 // active checks passed in a row
	inflight     atomic.Int64 // requests sent and not finished, for least_requests
}

// inRotation reports whether requests may go to the target. It reads the
// clock only for a target that was ejected.
func (s *targetState) inRotation() bool {
	if s.down.Load() {
		return false
	}
	until := s.ejectedUntil.Load()
	return until == 0 || time.Now().UnixNano() >= until
}

// member is one target of one compiled pool. It is the transport of the
// forwarders that send to the target: it counts what the target did.
type member struct {
	*targetState
	pool     *pool
	url      *url.URL
	name     string // the target URL: in the access log and the metrics labels
	checkURL string

	requests  prometheus.Counter // nil without metrics
	retries   prometheus.Counter
	failures  [numCauses]prometheus.Counter
	ejections [numEjections]prometheus.Counter
}

// failureCause is why a request to a target failed, as the metrics say it.
type failureCause int

const (
	causeRefused         failureCause = iota // the dial failed
	causeConnectTimeout                      // the dial took longer than connect_timeout
	causeResponseTimeout                     // no response headers within response_timeout
	causeReset                               // the connection broke before the response
	causeOther                               // TLS, a malformed response
	numCauses
)

var causeNames = [numCauses]string{"refused", "connect_timeout", "response_timeout", "reset", "other"}

// dialError marks a failure to connect: nothing of the request reached the
// target, so it may go to another one.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// newPoolTransport is the shared transport's tuning with the pool's
// timeouts, room for idle connections to every target, and dial errors
// marked as such; the lean transport shares it where it fits.
func newPoolTransport(p Pool) *poolTransport {
	t := newTransport()
	d := &net.Dialer{Timeout: p.ConnectTimeout, KeepAlive: 30 * time.Second}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, &dialError{err}
		}
		return c, nil
	}
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &upstreamConn{Conn: c}, nil
	}
	t.ResponseHeaderTimeout = p.ResponseTimeout
	t.MaxIdleConns = t.MaxIdleConnsPerHost * len(p.Targets)
	pt := &poolTransport{std: t}
	if leanSupported {
		pt.lean = newLeanTransport(dial, t)
	}
	return pt
}

// sameTransport reports whether a pool built for q can keep p's transport.
func (p Pool) sameTransport(q Pool) bool {
	return p.ConnectTimeout == q.ConnectTimeout && p.ResponseTimeout == q.ResponseTimeout && len(p.Targets) == len(q.Targets)
}

// RoundTrip sends req to the member's target and keeps its count: any
// response is a success; a failure the client did not cause is counted,
// and max_fails of them in a row eject the target.
func (m *member) RoundTrip(req *http.Request) (*http.Response, error) {
	if m.requests != nil {
		m.requests.Inc()
	}
	var res *http.Response
	var err error
	switch t := m.pool.owned; {
	case t == nil:
		// A transport of Options: its resends are its own.
		res, err = m.pool.transport.RoundTrip(req)
	case t.leanCarries(req):
		// It sends nothing twice: no guard needed.
		res, err = t.lean.RoundTrip(req)
	case !mayBeResent(req):
		res, err = t.std.RoundTrip(req)
	default:
		res, err = t.std.RoundTrip(m.guard(req))
	}
	if err == nil {
		if m.fails.Load() != 0 {
			m.fails.Store(0)
		}
		return res, nil
	}
	if cause, counted := classify(req, err); counted {
		m.failed(req.Context(), cause)
	}
	return nil, err
}

// classify says whether err is the target's failure, and which. The
// client leaving, or breaking its own body, says nothing of the target.
func classify(req *http.Request, err error) (failureCause, bool) {
	var bodyErr *clientBodyError
	var maxBytes *http.MaxBytesError
	if req.Context().Err() != nil || errors.As(err, &bodyErr) || errors.As(err, &maxBytes) {
		return 0, false
	}
	var netErr net.Error
	timeout := errors.As(err, &netErr) && netErr.Timeout()
	var dialErr *dialError
	switch {
	case errors.As(err, &dialErr) && timeout:
		return causeConnectTimeout, true
	case errors.As(err, &dialErr):
		return causeRefused, true
	case timeout:
		return causeResponseTimeout, true
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return causeReset, true
	}
	return causeOther, true
}

func (m *member) failed(ctx context.Context, cause failureCause) {
	if c := m.failures[cause]; c != nil {
		c.Inc()
	}
	p := m.pool
	if cause == causeResponseTimeout && !p.EjectOnTimeout {
		// A slow answer says more of the request than of the target: one
		// client's slow requests would otherwise eject the whole pool.
		return
	}
	n := m.fails.Add(1)
	if p.MaxFails < 0 || len(p.members) < 2 || n < int64(p.MaxFails) {
		return
	}
	p.eject(ctx, m, cause, n)
}

// ejection is what became of a target's max_fails failures in a row, as
// the metrics say it.
type ejection int

const (
	ejected               ejection = iota
	keptMaxEjectedPercent          // max_ejected_percent of the targets are out already
	keptLastTarget                 // it is the last target in rotation
	numEjections
)

var ejectionNames = [numEjections]string{"ejected", "kept_max_ejected_percent", "kept_last_target"}

// eject takes m out of rotation for FailTimeout, unless that would put
// more than MaxEjectedPercent of the pool's targets out for failures at
// once, or leave none in rotation (failed health checks included): then
// m stays, and its next failure asks again. One ejection is decided at a
// time, so that two targets failing together cannot both pass the check.
func (p *pool) eject(ctx context.Context, m *member, cause failureCause, n int64) {
	p.ejecting.Lock()
	defer p.ejecting.Unlock()
	now := time.Now()
	out, inRotation := 0, 0
	for _, o := range p.members {
		if o == m {
			continue
		}
		if until := o.ejectedUntil.Load(); until != 0 && now.UnixNano() < until {
			out++
		}
		if o.inRotation() {
			inRotation++
		}
	}
	result := ejected
	switch {
	case inRotation == 0:
		result = keptLastTarget
	case p.MaxEjectedPercent < 0 || (out+1)*100 > p.MaxEjectedPercent*len(p.members):
		result = keptMaxEjectedPercent
	}
	if result != ejected {
		if c := m.ejections[result]; c != nil {
			c.Inc()
		}
		if n == int64(p.MaxFails) {
			p.logger.LogAttrs(ctx, slog.LevelWarn, "upstream target kept in rotation despite failures",
				slog.String("pool", p.Name), slog.String("target", m.name),
				slog.String("cause", causeNames[cause]), slog.Int64("failures_in_a_row", n),
				slog.String("because", ejectionNames[result]))
		}
		return
	}
	prev := m.ejectedUntil.Swap(now.Add(p.FailTimeout).UnixNano())
	m.passes.Store(0)
	if prev == 0 || now.UnixNano() >= prev {
		if c := m.ejections[ejected]; c != nil {
			c.Inc()
		}
		p.logger.LogAttrs(ctx, slog.LevelWarn, "upstream target ejected",
			slog.String("pool", p.Name), slog.String("target", m.name),
			slog.String("cause", causeNames[cause]), slog.Int64("failures_in_a_row", n),
			slog.Duration("for", p.FailTimeout))
	}
}

// pick returns the index of a member in rotation other than exclude, or
// -1 when there is none.
func (p *pool) pick(exclude int) int {
	ms := p.members
	if len(ms) == 1 {
		if exclude != 0 && ms[0].inRotation() {
			return 0
		}
		return -1
	}
	if p.Balance == LeastRequests {
		return p.leastRequests(exclude)
	}
	n := uint64(len(ms))
	start := p.next.Add(1)
	for k := range n {
		i := int((start + k) % n)
		if i != exclude && ms[i].inRotation() {
			return i
		}
	}
	return -1
}

// leastRequests draws two members and takes the one with fewer requests
// in flight; when neither is in rotation, the least busy of the rest.
func (p *pool) leastRequests(exclude int) int {
	ms := p.members
	a := rand.IntN(len(ms))
	b := rand.IntN(len(ms) - 1)
	if b >= a {
		b++
	}
	okA := a != exclude && ms[a].inRotation()
	okB := b != exclude && ms[b].inRotation()
	switch {
	case okA && okB:
		if ms[b].inflight.Load() < ms[a].inflight.Load() {
			return b
		}
		return a
	case okA:
		return a
	case okB:
		return b
	}
	best := -1
	for i, m := range ms {
		if i != exclude && m.inRotation() && (best < 0 || m.inflight.Load() < ms[best].inflight.Load()) {
			best = i
		}
	}
	return best
}

// mayResend reports whether a request that reached no target may be sent
// to another: its method is idempotent and it has no body, so nothing
// could be sent twice even if the first target had seen it.
func mayResend(r *http.Request) bool {
	if (r.Body != nil && r.Body != http.NoBody) || r.ContentLength != 0 {
		return false
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// forwardWriter is what a route's forwarders write through. It lets the
// forwarder's error handler hand a request back, unanswered, when nothing
// of it reached the target and it may go to another. It lives in the
// pooled capture, so that a request costs no allocation for it.
type forwardWriter struct {
	http.ResponseWriter
	route     *route
	resend    bool  // the request may go to another target
	unreached error // set instead of an answer
	// settle takes the upstream's final head (nil: nothing is charged by
	// the response, or the gateway answers instead of the upstream).
	settle *settlement
	// unmeasured: the gateway answered for a cause that says nothing of
	// the pool's latency (the client's body, no target, a connection
	// refused); failed: the pool failed the exchange (overload.Admission.Fail).
	unmeasured, failed bool
	// client is the client's request context when the exchange with the
	// upstream outlives it (settlement.readOn; nil otherwise); late: the
	// upstream's final head came after the client had left, so nothing
	// more goes to the client.
	client context.Context
	late   bool
}

// errClientLeft fails a write of a response whose client left before
// its head.
var errClientLeft = errors.New("client left before the response head")

// Unwrap lets http.ResponseController reach the server's writer, for
// flushes and upgrades.
func (f *forwardWriter) Unwrap() http.ResponseWriter { return f.ResponseWriter }

// WriteHeader gives a 1xx the route's response header rules: ReverseProxy
// relays an upstream's 1xx with its headers as they came, from a client
// trace that ModifyResponse never sees. A final response the upstream sent
// without a Content-Type goes without one: the server would sniff one from
// the first bytes of the body when the header map has no Content-Type key,
// and a key with no values stops it and writes nothing. So a route's rule
// that removes Content-Type removes it.
func (f *forwardWriter) WriteHeader(code int) {
	h := f.ResponseWriter.Header()
	if code >= 100 && code <= 199 {
		f.route.responseRules.apply(h)
	} else {
		if _, ok := h["Content-Type"]; !ok {
			h["Content-Type"] = nil
		}
		if f.settle != nil && !f.settle.headed {
			f.settle.head(code, h)
		}
		if f.client != nil && f.client.Err() != nil {
			// Logged as the client's abort; the body is not copied to
			// nobody (the trailer's body reads on, bounded, on Close).
			code, f.late = statusClientClosed, true
		}
	}
	f.ResponseWriter.WriteHeader(code)
}

func (f *forwardWriter) Write(p []byte) (int, error) {
	if f.late {
		return 0, errClientLeft
	}
	return f.ResponseWriter.Write(p)
}

// forward sends r to a target of the route's pool, and once more to
// another target when the first could not be reached and r may be sent
// again. With no target in rotation, the answer is 502 at once.
func (rt *route) forward(w http.ResponseWriter, r *http.Request, x *exchange) {
	p := rt.pool
	fw := x.fw
	*fw = forwardWriter{ResponseWriter: w, route: rt, settle: x.settling}
	i := p.pick(-1)
	if i < 0 {
		fw.unmeasured = true
		writeProblem(w, problemNoTarget)
		return
	}
	fw.resend = len(p.members) > 1 && mayResend(r)
	out := r // as the upstream exchange sees it
	if s := x.settling; s != nil && byHeader(s.charges) {
		out, fw.client = r.WithContext(s.readOn(r.Context(), p.ResponseTimeout)), r.Context()
	}
	for attempt := 0; ; attempt++ {
		m := p.members[i]
		x.target = m.name
		if rt.tracing != nil {
			rt.tracing.serveUpstream(rt.forwards[i], fw, out, x.method, p, m, attempt)
		} else {
			m.serve(rt.forwards[i], fw, out)
		}
		err := fw.unreached
		if err == nil {
			return
		}
		fw.unreached, fw.resend = nil, false
		j := p.pick(i)
		if j < 0 || r.Context().Err() != nil {
			rt.forwards[i].ErrorHandler(fw, r, err)
			return
		}
		if m.retries != nil {
			m.retries.Inc()
		}
		i = j
	}
}

// serve forwards r through rp, counted in flight on m until it returns
// or panics: ReverseProxy aborts a response cut off mid-body with
// http.ErrAbortHandler, which the server recovers.
func (m *member) serve(rp *httputil.ReverseProxy, w http.ResponseWriter, r *http.Request) {
	m.inflight.Add(1)
	defer m.inflight.Add(-1)
	rp.ServeHTTP(w, r)
}

// newForwarders builds the route's forwarder to each target of its pool.
// Each answers errors as newForwarder does, except one that reached no
// target when the request may go to another: that one is left to forward.
func newForwarders(rt *route, logger *slog.Logger, underscores bool) []*httputil.ReverseProxy {
	out := make([]*httputil.ReverseProxy, len(rt.pool.members))
	for i, m := range rt.pool.members {
		rp := newForwarder(rt, m.url, m, logger, underscores).(*httputil.ReverseProxy)
		answer := rp.ErrorHandler
		rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
			if rt.tracing != nil {
				upstreamFailed(r, err)
			}
			var dialErr *dialError
			if fw, ok := w.(*forwardWriter); ok && fw.resend && errors.As(err, &dialErr) && r.Context().Err() == nil {
				fw.unreached = err
				return
			}
			if fw, ok := w.(*forwardWriter); ok {
				// The gateway answers: no response of the upstream's to
				// charge by.
				fw.settle = nil
			}
			answer(w, r, err)
		}
		out[i] = rp
	}
	return out
}

// buildPools compiles the configuration's pools and one pool for each URL
// a route names, keyed by name (a URL's pool by the URL). Targets that
// prev's pool of the same name had keep their health; transports are kept
// when the pool's timeouts and size did not change. It returns the
// transports prev owned that the new pools do not keep.
func (h *Handler) buildPools(cfg Config, prev *compiled) (map[string]*pool, []*poolTransport, error) {
	defs := make([]Pool, 0, len(cfg.Pools))
	names := map[string]bool{}
	for _, p := range cfg.Pools { // each once: ValidatePools
		names[p.Name] = true
		defs = append(defs, p)
	}
	for _, r := range cfg.Routes {
		if r.Upstream == "" || r.Pool != "" {
			continue
		}
		if !names[r.Upstream] {
			names[r.Upstream] = true
			defs = append(defs, Pool{Name: r.Upstream, Targets: []string{r.Upstream}})
		}
	}
	pools := make(map[string]*pool, len(defs))
	kept := map[*poolTransport]bool{}
	for _, def := range defs {
		def, err := def.withDefaults()
		if err != nil {
			return nil, nil, err
		}
		var old *pool
		if prev != nil {
			old = prev.pools[def.Name]
		}
		p := &pool{Pool: def, logger: h.opts.Logger}
		switch {
		case h.opts.Transport != nil:
			p.transport = h.opts.Transport
		case old != nil && old.owned != nil && old.Pool.sameTransport(def):
			p.owned = old.owned
			kept[p.owned] = true
		default:
			p.owned = newPoolTransport(def)
		}
		if p.owned != nil {
			p.transport = p.owned
		}
		if mt := h.opts.Metrics; mt != nil {
			p.duration = mt.UpstreamDuration.WithLabelValues(p.Name)
		}
		if def.Overload != nil {
			var keep *overloadGate
			if old != nil {
				keep = old.overload
			}
			if p.overload, err = newOverloadGate(def, keep, h.opts.Metrics); err != nil {
				return nil, nil, fmt.Errorf("proxy: pool %q: %w", def.Name, err)
			}
		}
		for _, target := range def.Targets {
			u, _ := parseTarget(target) // withDefaults refused any other
			m := &member{pool: p, url: u, name: u.String()}
			if old != nil {
				for _, om := range old.members {
					if om.name == m.name {
						m.targetState = om.targetState
					}
				}
			}
			if m.targetState == nil {
				m.targetState = &targetState{}
			}
			if def.Health != nil {
				cu := *u
				cu.Path, cu.RawPath = def.Health.Path, ""
				m.checkURL = cu.String()
			}
			if mt := h.opts.Metrics; mt != nil {
				m.requests = mt.UpstreamRequests.WithLabelValues(p.Name, m.name)
				m.retries = mt.UpstreamRetries.WithLabelValues(p.Name, m.name)
				for c := range m.failures {
					m.failures[c] = mt.UpstreamFailures.WithLabelValues(p.Name, m.name, causeNames[c])
				}
				for e := range m.ejections {
					m.ejections[e] = mt.UpstreamEjections.WithLabelValues(p.Name, m.name, ejectionNames[e])
				}
			}
			p.members = append(p.members, m)
		}
		pools[def.Name] = p
	}
	var dropped []*poolTransport
	if prev != nil {
		for _, p := range prev.pools {
			if p.owned != nil && !kept[p.owned] {
				dropped = append(dropped, p.owned)
			}
		}
	}
	return pools, dropped, nil
}
