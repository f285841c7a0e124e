package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/edgegate/gateway/edge"
	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/overload"
	"github.com/edgegate/gateway/subject"
)

// Limiter is what the request path asks. Backends live in package limiter.
type Limiter interface {
	Evaluate(ctx context.Context, req limiter.Request) limiter.Outcome
	// StandingDenial reports a denial the limiter can tell without
	// charging or a round trip; see limiter.Backend.
	StandingDenial(req limiter.Request) (limiter.Evaluated, bool)
}

// Route is one route block, compiled. Route.Validate holds the rules of
// its path, upstream URL, cost, rewrite, host header, header rules and
// upgrades.
type Route struct {
	OperationID string
	Host        string // exact, lower case, no port; empty matches any host
	// Path is the prefix matched, on whole segments, in any form RoutePath
	// takes; it is matched in RoutePath's.
	Path    string
	Methods []string // empty allows every method
	// Upstream is a URL to forward to (a pool of that one target, with
	// the pool defaults), or empty when Pool names one of Config.Pools.
	Upstream string
	Pool     string
	// Policies are the route's limit, decided together, atomically: every
	// enforced policy must allow, and when one denies none is charged. One
	// policy is a list of one; none is no limit.
	Policies []*limiter.Policy
	// Plans select the policies of a subject by its plan (subject.Subject's
	// Plan), decided together as Policies are. A subject without a plan, or
	// with one not listed, gets Policies.
	Plans   map[string][]*limiter.Policy
	Subject []subject.Kind
	// ClientCertIdentity is what of a verified client certificate the
	// client_cert source reads. ClientCertHeader, when set, carries it to
	// the upstream: the gateway removes any copy the client sent, and
	// writes it only when the client's certificate verified.
	ClientCertIdentity subject.CertIdentity
	ClientCertHeader   string
	Cost               int64
	// MaxBodyBytes caps the request body; 0 means no cap. A declared
	// Content-Length over it is refused before the limiter is asked; a
	// streamed body that runs over is cut and answered 413.
	MaxBodyBytes int64
	// Rewrite replaces Path, on whole segments of the normalized path, with
	// RewritePrefix in the path sent upstream ("" strips it); the query is
	// kept. RewritePrefix is any form NormalizeRewritePrefix accepts.
	Rewrite       bool
	RewritePrefix string
	// HostHeader is the Host sent upstream; empty sends the target's.
	HostHeader string
	// RequestHeaders apply to the request sent upstream after the gateway's
	// forwarding headers; ResponseHeaders to the upstream's response, after
	// the gateway's RateLimit headers. Neither may touch what the gateway
	// manages (Validate says what that is).
	RequestHeaders  HeaderRules
	ResponseHeaders HeaderRules
	// Upgrades are the protocols (without versions, in any case) a request
	// may switch to, such as "websocket"; h2c never. Any other Upgrade
	// request is forwarded without its Upgrade header.
	Upgrades []string
	// CaseInsensitive matches Path with ASCII letters in any case
	// ("/ORDERS" and "/%4Frders" are "/orders"), for a backend that folds
	// case (IIS), so that no spelling of the path dodges the route's limit.
	CaseInsensitive bool
	// IgnoreExtensions are extensions (".json"; Validate) that the backend
	// takes off the last segment before it routes (Rails formats, Spring's
	// suffix patterns): Path followed by one of them, at the end of the
	// path, is the route's ("/orders.json" is "/orders"). In any case when
	// CaseInsensitive. Either way the path goes upstream as the client
	// spelled it (normalized): a backend that folds it serves it as it
	// always has, and one that picks a format by the extension still sees it.
	IgnoreExtensions []string
	// Priority is the route's requests' place in the queue of a pool with
	// an overload block; the zero Priority is overload.Default.
	// PlanPriority lowers it for subjects on a plan (never raises it); it
	// needs Policies or Plans, for only a limited route knows the plan.
	Priority     overload.Priority
	PlanPriority map[string]overload.Priority
}

// statusClientClosed is logged for a request whose client left before it
// could be answered (nginx's 499).
const statusClientClosed = 499

// DefaultMaxBodyBytes is the body cap of a route that sets none: 10 MiB.
const DefaultMaxBodyBytes = 10 << 20

// Config is everything the request path reads. It is immutable once passed
// to NewHandler or Swap.
type Config struct {
	Routes []Route
	// AdminToken is the bearer token of the admin API (AdminAPI); empty,
	// the API answers 404. See CheckBearerToken.
	AdminToken string
	Resolver   *subject.Resolver
	Limiter    Limiter
	// Deadline bounds one limiter decision. Default
	// limiter.DefaultDeadline; else at least MinTimeout.
	Deadline time.Duration
	// FailureRetryAfter is the Retry-After of a 503. Default
	// DefaultFailureRetryAfter; else at least MinFailureRetryAfter.
	FailureRetryAfter time.Duration
	// AllowUnderscoreHeaders forwards request headers whose names hold
	// "_". By default they are dropped: CGI, WSGI and Rack backends fold
	// "_" into "-", so X_Real_IP would reach them as X-Real-IP, past the
	// gateway's own checks (nginx drops them too).
	AllowUnderscoreHeaders bool
	// TunnelIdleTimeout closes an upgraded connection that carried no byte
	// either way for this long. Default DefaultTunnelIdleTimeout; else at
	// least MinTimeout.
	TunnelIdleTimeout time.Duration
	// BodyReadTimeout is how long the gateway waits for the next byte of a
	// request body it forwards; past it the client gets 408 and the
	// connection closes. Default DefaultBodyReadTimeout; else at least
	// MinTimeout.
	BodyReadTimeout time.Duration
	// Pools are the upstream blocks routes name. A target that a reload
	// keeps in its pool keeps its health.
	Pools []Pool
	// MaxDelayed bounds the requests this instance holds at once for a
	// policy's max_delay; past it a request a policy would delay is
	// refused at once. Default DefaultMaxDelayed; else at least 1.
	MaxDelayed int
	// InvalidTokenPolicy is the budget of invalid bearer tokens per client
	// address (see tokenBudget); nil: DefaultInvalidTokenPolicy. A shadow
	// policy is charged and refuses nothing.
	InvalidTokenPolicy *limiter.Policy
	// RLSRules map Envoy's rate limit service's descriptors to budgets
	// (RateLimitService); ValidateRLSRules holds their rules. RLSToken,
	// when set, is the bearer token every call of the service must carry
	// (at least MinBearerTokenBytes).
	RLSRules []RLSRule
	RLSToken string
}

// DefaultFailureRetryAfter is Config.FailureRetryAfter's default.
const DefaultFailureRetryAfter = time.Second

// DefaultBodyReadTimeout is Config.BodyReadTimeout's default.
const DefaultBodyReadTimeout = 30 * time.Second

// Options are the parts of a Handler that do not change on reload.
type Options struct {
	Logger    *slog.Logger // access log and errors; nil discards
	AccessLog bool
	Metrics   *Metrics // nil: no metrics
	// Transport reaches the upstreams; nil uses newTransport().
	Transport http.RoundTripper
	// Tracer starts a span per request, with children for the limiter
	// and each upstream attempt, and the W3C trace context goes upstream;
	// nil: no traces, at no cost to the request path.
	Tracer trace.Tracer
}

// Handler serves the public listener.
type Handler struct {
	opts    Options
	tracing *tracing // nil without a tracer
	current atomic.Pointer[compiled]
	evalIDs evaluationIDs
	// refusals bound the access log lines of requests that forward
	// nothing.
	refusals edge.LogThrottle[refusalLogKey]

	swap   sync.Mutex // one Swap at a time, and Close
	checks *healthChecks
	// tunnels are the upgraded connections open now, across reloads.
	tunnels *openTunnels
	// held are the requests held now for a policy's max_delay, across
	// reloads.
	held heldRequests
}

type compiled struct {
	router            router
	resolver          *subject.Resolver
	limiter           Limiter
	deadline          time.Duration
	failureRetryAfter string
	bodyReadTimeout   time.Duration
	maxDelayed        int
	pools             map[string]*pool
	unrouted          *routeMetrics // the requests no route matched; nil without metrics
	routes            []*route      // in file order, for the admin API
	adminToken        *bearerToken  // nil: no admin API
	tokens            *tokenBudget
	rls               rlsTable          // by domain
	rlsToken          *bearerToken      // nil: calls need no token
	penalties         limiter.Penalties // nil: the limiter keeps none
}

type route struct {
	Route
	limits        *limits // nil: no limit (for subjects without a plan)
	planLimits    map[string]*limits
	pool          *pool
	forwards      []*httputil.ReverseProxy // to each member of pool, in order
	requestRules  headerRules
	responseRules headerRules
	query         subject.Query // what the route asks the resolver
	metrics       *routeMetrics // nil without metrics
	tunnels       tunnelSettings
	tracing       *tracing // nil without a tracer
	// asksTrailers: a policy of the route or of a plan takes its cost from
	// a header, which may come as a trailer.
	asksTrailers bool
	// penalizes: an enforced policy of the route or of a plan has a
	// penalty (penalties.go).
	penalizes bool
}

// NewHandler compiles cfg and returns a ready Handler.
func NewHandler(opts Options, cfg Config) (*Handler, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{opts: opts, evalIDs: newEvaluationIDs(), tunnels: newOpenTunnels()}
	if opts.Tracer != nil {
		h.tracing = &tracing{tracer: opts.Tracer}
	}
	if opts.Metrics != nil {
		opts.Metrics.upstreams.handler.Store(h)
	}
	if err := h.Swap(cfg); err != nil {
		return nil, err
	}
	return h, nil
}

// Swap compiles cfg and makes it the configuration of every request that
// starts from now on. On error the current configuration stays. Requests
// in flight finish on the pools they started with; the active checks of
// the old configuration stop and those of the new one start.
func (h *Handler) Swap(cfg Config) error {
	h.swap.Lock()
	defer h.swap.Unlock()
	prev := h.current.Load()
	c, dropped, err := h.compile(cfg, prev)
	if err != nil {
		return err
	}
	h.current.Store(c)
	for _, p := range c.pools {
		p.overload.commit()
	}
	if h.checks != nil {
		h.checks.stop()
	}
	h.checks = startHealthChecks(c.pools)
	for _, t := range dropped {
		t.CloseIdleConnections()
	}
	if prev != nil && h.opts.Metrics != nil {
		h.opts.Metrics.forgetTargets(prev.pools, c.pools)
	}
	return nil
}

// Close stops the active health checks, closes idle upstream connections
// and closes the client side of every upgraded tunnel still open (which
// ends both its copies, and ReverseProxy then closes the upstream side).
// Requests in flight finish; the Handler serves on, without active checks.
// It is meant for after the listeners' drain, which closes the tunnels of
// the public listeners; this catches what is left.
func (h *Handler) Close() {
	h.swap.Lock()
	defer h.swap.Unlock()
	h.tunnels.closeAll()
	if h.checks != nil {
		h.checks.stop()
		h.checks = nil
	}
	if c := h.current.Load(); c != nil {
		for _, p := range c.pools {
			if p.owned != nil {
				p.owned.CloseIdleConnections()
			}
		}
	}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := h.current.Load()
	x := exchange{metrics: c.unrouted, in: c.resolver.Inbound(r)}
	start := time.Now()
	cw := captures.Get().(*capture)
	x.fw = &cw.fw
	if h.tracing != nil {
		x.method = c.router.methodName(r.Method)
		r, x.span = h.tracing.startServer(r, x.method, x.in.PeerTrusted())
		x.in = c.resolver.Inbound(r) // the request as it goes on, with the span's context
	}
	served := false
	defer func() {
		if !served {
			// ReverseProxy aborts a response cut off mid-body with a
			// panic (http.ErrAbortHandler) that the server recovers: the
			// request reached the upstream, and is counted and logged.
			x.settle()
			x.releaseLease()
			code, written := cw.result()
			h.record(r, c, &x, code, written, start, true)
		}
	}()
	h.serve(cw.wrap(w), cw, r, c, &x)
	served = true
	x.settle()
	x.releaseLease()
	code, written := cw.result()
	cw.done()
	h.record(r, c, &x, code, written, start, x.aborted)
}

// serve is the request path, in order. Every branch that does not forward
// writes its own answer; only an allowed decision reaches the upstream.
func (h *Handler) serve(w http.ResponseWriter, cw *capture, r *http.Request, c *compiled, x *exchange) {
	escaped := r.URL.EscapedPath()
	path, err := NormalizePath(escaped)
	if err != nil {
		x.outcome = "rejected"
		writeProblem(w, problemBadPath)
		return
	}
	if c.router.methodCaseFolded(r.Method) {
		x.outcome = "rejected"
		writeProblem(w, problemMethodCase)
		return
	}
	rt, allow := c.router.match(r.Host, path, r.Method)
	if rt == nil {
		if len(allow) > 0 {
			x.outcome = "rejected"
			w.Header()["Allow"] = allow
			writeProblem(w, problemMethodNotAllowed)
			return
		}
		x.outcome = "no_route"
		writeProblem(w, problemNoRoute)
		return
	}
	x.route = rt.OperationID
	if x.span != nil {
		h.tracing.routed(x.span, x.method, rt)
	}
	if rt.metrics != nil {
		x.metrics = rt.metrics
		rt.metrics.inFlight.Inc()
		// Deferred, so that a response ReverseProxy aborts with a panic
		// leaves the gauge too.
		defer rt.metrics.inFlight.Dec()
	}
	if rt.MaxBodyBytes > 0 {
		if r.ContentLength > rt.MaxBodyBytes {
			x.outcome = "rejected"
			writeProblem(w, problemTooLarge)
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = http.MaxBytesReader(w, r.Body, rt.MaxBodyBytes)
		}
	}

	if !rt.limited() {
		x.outcome = "unlimited"
	} else if !h.limit(w, r, c, rt, x) {
		return
	}
	if rt.pool.overload != nil {
		if !h.admit(w, r, rt, x) {
			return
		}
		// Deferred, so that a response cut off mid-body frees its slot.
		defer x.endAdmission(r, cw)
	}

	var body *clientBody
	if r.Body != nil && r.Body != http.NoBody {
		body = &clientBody{ReadCloser: r.Body, rc: http.NewResponseController(w), timeout: c.bodyReadTimeout}
		r.Body = body
	}
	// The path forwarded is the one that was matched, rewritten if the
	// route says so.
	if fwd := rt.forwardPath(path); fwd != escaped {
		r.URL.Path, _ = url.PathUnescape(fwd)
		// A RawPath only where the default escaping would not give fwd
		// back (an escape, or a character such as '!' that url.URL
		// escapes): ReverseProxy joins plain paths at half the cost.
		r.URL.RawPath = ""
		if strings.IndexByte(fwd, '%') >= 0 || r.URL.EscapedPath() != fwd {
			r.URL.RawPath = fwd
		}
	}
	x.in.ForwardClientCert(rt.query)
	x.in.Believe()
	start := time.Now()
	x.forwarded = true
	rt.forward(w, r, x)
	x.upstream = time.Since(start)
	if d := rt.pool.duration; d != nil {
		d.Observe(x.upstream.Seconds())
	}
	if body != nil && body.timedOut.Load() && !cw.final {
		// No body byte for body_read_timeout. The server cancelled the
		// request when the read failed, so the forwarder had nobody to
		// answer; the client is still there to read a 408. The transport
		// has closed the upstream connection, whose request it could not
		// finish.
		writeBodyTimeout(w, r, h.opts.Logger, rt.OperationID)
		x.outcome = "rejected"
		return
	}
	switch {
	case x.fw.late:
		// The client left before the response head, which came as the
		// exchange read on to a cost trailer (forwardWriter).
		x.aborted = true
	case !cw.final && r.Context().Err() != nil:
		// The client reset its stream (HTTP/2, HTTP/3) or closed its
		// connection before the response head: nobody answered it, and
		// the forwarder wrote nothing. It is the client's abort.
		x.aborted = true
		w.WriteHeader(statusClientClosed)
	}
	if x.outcome == "" {
		x.outcome = "allowed"
	}
}
