package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/subject"
)

// compile turns cfg into what the request path reads: defaults filled,
// every rule checked, pools built (keeping what prev's pools share with
// them), then each route, the token budgets and the rls rules. It returns
// the transports of prev's pools that cfg drops.
func (h *Handler) compile(cfg Config, prev *compiled) (*compiled, []*poolTransport, error) {
	if cfg.Limiter == nil || cfg.Resolver == nil {
		return nil, nil, errors.New("proxy: config needs a limiter and a resolver")
	}
	if err := cfg.Validate(); err != nil {
		return nil, nil, fmt.Errorf("proxy: %w", err)
	}
	cfg.withDefaults()
	if err := ValidatePools(cfg.Pools); err != nil {
		return nil, nil, fmt.Errorf("proxy: %w", err)
	}
	if err := ValidateRoutes(cfg.Routes); err != nil {
		return nil, nil, fmt.Errorf("proxy: %w", err)
	}
	if err := ValidateRLSRules(cfg.RLSRules, cfg.Routes); err != nil {
		return nil, nil, fmt.Errorf("proxy: %w", err)
	}
	pools, dropped, err := h.buildPools(cfg, prev)
	if err != nil {
		return nil, nil, err
	}
	c := &compiled{
		resolver:          cfg.Resolver,
		limiter:           cfg.Limiter,
		deadline:          cfg.Deadline,
		failureRetryAfter: strconv.FormatInt(ceilSeconds(cfg.FailureRetryAfter), 10),
		bodyReadTimeout:   cfg.BodyReadTimeout,
		maxDelayed:        cfg.MaxDelayed,
		pools:             pools,
		penalties:         penaltiesOf(cfg.Limiter),
	}
	if err := h.compileGuards(cfg, c); err != nil {
		return nil, nil, err
	}
	var gate subject.TokenGate
	if !c.tokens.limits.shadowOnly {
		gate = c.tokens
	}
	c.routes = make([]*route, 0, len(cfg.Routes))
	for i := range cfg.Routes {
		r, err := h.compileRoute(cfg, cfg.Routes[i], pools, gate)
		if err != nil {
			return nil, nil, fmt.Errorf("proxy: route %q: %w", cfg.Routes[i].OperationID, err)
		}
		c.routes = append(c.routes, r)
	}
	c.router = newRouter(c.routes)
	if h.opts.Metrics != nil {
		c.unrouted = h.opts.Metrics.forRoute("none")
	}
	if c.rls, err = compileRLSRules(cfg.RLSRules, c.routes); err != nil {
		return nil, nil, fmt.Errorf("proxy: %w", err)
	}
	return c, dropped, nil
}

// withDefaults fills the zero values of cfg's own settings.
func (cfg *Config) withDefaults() {
	if cfg.Deadline == 0 {
		cfg.Deadline = limiter.DefaultDeadline
	}
	if cfg.FailureRetryAfter == 0 {
		cfg.FailureRetryAfter = DefaultFailureRetryAfter
	}
	if cfg.TunnelIdleTimeout == 0 {
		cfg.TunnelIdleTimeout = DefaultTunnelIdleTimeout
	}
	if cfg.BodyReadTimeout == 0 {
		cfg.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if cfg.MaxDelayed == 0 {
		cfg.MaxDelayed = DefaultMaxDelayed
	}
	if cfg.InvalidTokenPolicy == nil {
		cfg.InvalidTokenPolicy = DefaultInvalidTokenPolicy
	}
}

// compileGuards builds what guards c besides the routes' limits: the
// budget of invalid tokens per client, and the admin API's and the rate
// limit service's tokens.
func (h *Handler) compileGuards(cfg Config, c *compiled) error {
	tokenLimits, err := newLimits([]*limiter.Policy{cfg.InvalidTokenPolicy})
	if err != nil {
		return fmt.Errorf("proxy: invalid token policy: %w", err)
	}
	c.tokens = &tokenBudget{limiter: cfg.Limiter, limits: tokenLimits, deadline: cfg.Deadline, evalIDs: &h.evalIDs}
	if c.adminToken, err = newBearerToken(cfg.AdminToken); err != nil {
		return fmt.Errorf("proxy: admin: %w", err)
	}
	if c.rlsToken, err = newBearerToken(cfg.RLSToken); err != nil {
		return fmt.Errorf("proxy: rls: %w", err)
	}
	return nil
}

// compileRoute compiles one route of cfg onto pools; gate guards its
// token verifications.
func (h *Handler) compileRoute(cfg Config, rc Route, pools map[string]*pool, gate subject.TokenGate) (*route, error) {
	r := &route{Route: rc}
	switch {
	case (r.Upstream == "") == (r.Pool == ""):
		return nil, errors.New("needs an upstream URL or a pool, not both")
	case r.Pool != "":
		if r.pool = pools[r.Pool]; r.pool == nil {
			return nil, fmt.Errorf("names no pool of the configuration: %q", r.Pool)
		}
	default:
		r.pool = pools[r.Upstream]
	}
	if err := r.Validate(cfg.Resolver.ManagedHeaders()); err != nil {
		return nil, err
	}
	r.Path, _ = RoutePath(r.Path)
	if r.Rewrite {
		r.RewritePrefix, _ = NormalizeRewritePrefix(r.RewritePrefix)
	}
	r.requestRules = compileHeaderRules(r.RequestHeaders)
	r.responseRules = compileHeaderRules(r.ResponseHeaders)
	r.Upgrades = lowerCase(r.Upgrades)
	if err := r.compileLimits(h.opts.Metrics, cfg.Limiter); err != nil {
		return nil, err
	}
	r.penalizes = r.hasPenalty()
	r.query = subject.Query{Sources: r.Subject, OperationID: r.OperationID, MapsPlan: r.mapsPlan, Gate: gate,
		CertIdentity: r.ClientCertIdentity}
	if r.ClientCertHeader != "" {
		r.query.CertHeader = http.CanonicalHeaderKey(r.ClientCertHeader)
	}
	if r.limited() && r.Cost < 1 {
		r.Cost = 1
	}
	if h.opts.Metrics != nil {
		r.metrics = h.opts.Metrics.forRoute(r.OperationID)
	}
	r.tunnels = tunnelSettings{idle: cfg.TunnelIdleTimeout, open: h.tunnels}
	r.tracing = h.tracing
	r.forwards = newForwarders(r, h.opts.Logger, cfg.AllowUnderscoreHeaders)
	return r, nil
}

// compileLimits compiles the route's policies and each plan's, their
// series bound to m (nil: none) and backend's.
func (r *route) compileLimits(m *Metrics, backend Limiter) error {
	compile := func(ps []*limiter.Policy) (*limits, error) {
		l, err := newLimits(ps)
		if err != nil {
			return nil, err
		}
		l.bindSeries(m, backend, r.OperationID)
		r.asksTrailers = r.asksTrailers || byHeader(l.charges)
		return l, nil
	}
	if len(r.Policies) > 0 {
		l, err := compile(r.Policies)
		if err != nil {
			return err
		}
		r.limits = l
	}
	for plan, ps := range r.Plans {
		l, err := compile(ps)
		if err != nil {
			return fmt.Errorf("plan %q: %w", plan, err)
		}
		if r.planLimits == nil {
			r.planLimits = map[string]*limits{}
		}
		r.planLimits[plan] = l
	}
	return nil
}
