package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/subject"
)

// Bounds of a ShouldRateLimit call: past them the call is refused
// (InvalidArgument), never hashed or looped over.
const (
	maxRLSDescriptors = 64
	maxRLSEntries     = 32
)

// rlsMaxMessageBytes bounds a call's message, and so the values of its
// entries: room for every descriptor and entry checkRLSRequest takes.
const rlsMaxMessageBytes = 1 << 20

// rlsHandshakeTimeout bounds a connection's TLS handshake and HTTP/2
// preface.
const rlsHandshakeTimeout = 5 * time.Second

// NewRLSServer is a gRPC server of h's RateLimitService, for the rate
// limit listener (edge.Servers.ServeRateLimit).
func NewRLSServer(h *Handler) *grpc.Server {
	srv := grpc.NewServer(grpc.ConnectionTimeout(rlsHandshakeTimeout), grpc.MaxRecvMsgSize(rlsMaxMessageBytes))
	rlsv3.RegisterRateLimitServiceServer(srv, h.RateLimitService())
	return srv
}

// RateLimitService is Envoy's rate limit service
// (envoy.service.ratelimit.v3.RateLimitService) over the handler's
// budgets: the configuration of the moment's rls rules, resolver, limiter
// and deadline, so a reload changes what it answers as it changes the
// request path.
func (h *Handler) RateLimitService() rlsv3.RateLimitServiceServer { return rlsService{h: h} }

type rlsService struct{ h *Handler }

// rlsCall is one ShouldRateLimit call as it is decided.
type rlsCall struct {
	c       *compiled
	start   time.Time
	outcome string // as gateway_rls_requests_total counts it
	headers http.Header
}

// ShouldRateLimit decides each descriptor on its own, as Envoy's service
// does: a descriptor no rule matches is OK with no limit, and the call is
// OVER_LIMIT when any descriptor is. A limiter that cannot decide fails
// the call with Unavailable, which Envoy's failure_mode_deny answers.
func (s rlsService) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	call := rlsCall{c: s.h.current.Load(), start: time.Now(), outcome: "ok"}
	var span trace.Span
	if t := s.h.tracing; t != nil {
		ctx, span = t.tracer.Start(ctx, "ShouldRateLimit", trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attrRLSDomain.String(call.c.rls.label(req.GetDomain()))))
	}
	resp, err := s.h.shouldRateLimit(ctx, &call, req)
	if err != nil {
		call.outcome = rlsErrorOutcome(err)
	}
	if m := s.h.opts.Metrics; m != nil {
		domain := call.c.rls.label(req.GetDomain())
		m.RLSRequests.WithLabelValues(domain, call.outcome).Inc()
		m.RLSDuration.WithLabelValues(domain).Observe(time.Since(call.start).Seconds())
	}
	if span != nil {
		span.SetAttributes(attrOutcome.String(call.outcome))
		if err != nil {
			span.SetStatus(otelcodes.Error, status.Code(err).String())
		}
		span.End()
	}
	return resp, err
}

const attrRLSDomain = attribute.Key("gateway.rls.domain")

// label is domain as metrics and spans name it: a domain of the rules, or
// "other", so a caller cannot mint series.
func (t rlsTable) label(domain string) string {
	if _, ok := t[domain]; ok {
		return domain
	}
	return "other"
}

// rlsErrorOutcome is the outcome of a call refused with err.
func rlsErrorOutcome(err error) string {
	switch status.Code(err) {
	case codes.Unauthenticated:
		return "unauthenticated"
	case codes.NotFound:
		return "unknown_domain"
	case codes.Unavailable:
		return "unavailable"
	case codes.Canceled, codes.DeadlineExceeded:
		return "abandoned"
	}
	return "invalid"
}

func (h *Handler) shouldRateLimit(ctx context.Context, call *rlsCall, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	c := call.c
	if c.rlsToken != nil {
		md, _ := metadata.FromIncomingContext(ctx)
		if auth := md.Get("authorization"); len(auth) != 1 || !c.rlsToken.admits(auth[0]) {
			return nil, status.Error(codes.Unauthenticated, "the rate limit service needs the configured token as a bearer token")
		}
	}
	if err := checkRLSRequest(req); err != nil {
		return nil, err
	}
	if _, ok := c.rls[req.Domain]; !ok {
		return nil, status.Error(codes.NotFound, "no rls_rule has this domain")
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for _, d := range req.Descriptors {
		st, err := h.decideDescriptor(ctx, call, req, d)
		if err != nil {
			return nil, err
		}
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			call.outcome = "over_limit"
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	for name, values := range call.headers {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: rlsHeaderNames[name], Value: strings.Join(values, ", ")})
	}
	return resp, nil
}

// rlsHeaderNames are the names of the headers setHeaders writes, as the
// answer spells them.
var rlsHeaderNames = map[string]string{"Ratelimit": "RateLimit", "Ratelimit-Policy": "RateLimit-Policy"}

// checkRLSRequest refuses a call the service cannot decide: one whose
// shape only Envoy's configuration sets. What a client can set (an entry's
// value, a cost) is decided, never refused: Envoy lets a call that fails
// through unless failure_mode_deny is set.
func checkRLSRequest(req *rlsv3.RateLimitRequest) error {
	switch {
	case req.GetDomain() == "":
		return status.Error(codes.InvalidArgument, "the domain is empty")
	case len(req.Descriptors) == 0:
		return status.Error(codes.InvalidArgument, "the descriptor list is empty")
	case len(req.Descriptors) > maxRLSDescriptors:
		return status.Errorf(codes.InvalidArgument, "more than %d descriptors", maxRLSDescriptors)
	}
	for _, d := range req.Descriptors {
		switch {
		case len(d.GetEntries()) == 0:
			return status.Error(codes.InvalidArgument, "a descriptor has no entries")
		case len(d.Entries) > maxRLSEntries:
			return status.Errorf(codes.InvalidArgument, "a descriptor has more than %d entries", maxRLSEntries)
		case d.IsNegativeHits:
			return status.Error(codes.InvalidArgument, "negative hits are not taken: a caller cannot refill a budget")
		}
		for _, e := range d.Entries {
			if e.GetKey() == "" || len(e.Key) > maxDescriptorValueBytes {
				return status.Errorf(codes.InvalidArgument, "a descriptor entry's key is empty or over %d bytes", maxDescriptorValueBytes)
			}
		}
	}
	return nil
}

// decideDescriptor asks the limiter for one descriptor and says what it
// answered. Its RateLimit headers go into call.headers.
func (h *Handler) decideDescriptor(ctx context.Context, call *rlsCall, req *rlsv3.RateLimitRequest, d *ratelimitv3.RateLimitDescriptor) (*rlsv3.RateLimitResponse_DescriptorStatus, error) {
	c := call.c
	pairs := make([]descriptorPair, len(d.Entries))
	for i, e := range d.Entries {
		pairs[i] = descriptorPair{e.Key, e.Value}
	}
	rule, m := c.rls.match(req.Domain, pairs)
	if rule == nil {
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}, nil
	}
	overLimit := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT}
	if len(m.identity) > maxDescriptorValueBytes {
		// No subject a rule could name: refused unhashed.
		return overLimit, nil
	}
	if repeatsKey(pairs, rule.Descriptor[rule.subjectAt].Key) || rule.planAt >= 0 && repeatsKey(pairs, rlsPlanKey) {
		// Whose budget, or which plan, is ambiguous, as a credential or
		// plan header sent twice is on HTTP, which refuses the request.
		return overLimit, nil
	}
	rt := rule.route
	s, err := c.resolver.Named(rule.kind, m.identity, rlsPlan(rule, m.plan), rt.query)
	if err != nil {
		// As on the request path: an unknown key, or no identity at
		// all, earns no budget.
		return overLimit, nil
	}
	if left := c.penaltyLeft(rt, s.Pseudonym); left > 0 {
		overLimit.DurationUntilReset = durationpb.New(left)
		return overLimit, nil
	}
	l := rt.limitsFor(s.Plan)
	if l == nil {
		if rt.limited() && plannedPerRequest(rule.kind) && rule.planAt < 0 {
			// Only plans limit the route and the rule reads no plan
			// entry: a subject on no plan looks the same as one whose
			// plan the rule does not carry, and a pass would be no limit
			// at all. A rule that reads one knows the subject is on no
			// plan the route maps, and passes it as HTTP does.
			return overLimit, nil
		}
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}, nil
	}
	cost := uint64(req.HitsAddend)
	if d.HitsAddend != nil {
		cost = d.HitsAddend.Value
	}
	cost = max(cost, 1)
	if cost > uint64(l.maxCost()) {
		// More than a policy takes at once: over the limit, unless no
		// policy is enforced.
		if l.shadowOnly {
			return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}, nil
		}
		return overLimit, nil
	}
	// The caller's deadline is its own business: a call it gives up on
	// ends as cancelled, which says nothing of Redis, rather than as a
	// deadline the backend's breaker would count against the node. The
	// decision's own bound is the request's Deadline.
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	o := c.limiter.Evaluate(lctx, limiter.Request{
		Policies: l.set, Subject: s.Pseudonym, Cost: int64(cost), EvaluationID: h.evalIDs.next(), NewID: true,
		Route: rt.OperationID, Deadline: call.start.Add(c.deadline), Start: call.start,
	})
	e, decided := o.(limiter.Evaluated)
	if !decided && ctx.Err() != nil {
		// The caller gave up first: no failure of the limiter's.
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if !decided {
		if inc, ok := o.(limiter.Incompatible); ok {
			h.opts.Logger.LogAttrs(ctx, slog.LevelError, "limiter configuration error",
				slog.String("route", rt.OperationID), slog.String("reason", inc.Reason.String()), errAttr(inc.Err))
		}
		if l.shadowOnly {
			return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}, nil
		}
		return nil, status.Errorf(codes.Unavailable, "the limiter did not decide: %s", limiter.OutcomeName(o))
	}
	if names := l.shadowDenials(e); names != nil && h.opts.Metrics != nil {
		for _, n := range names {
			h.opts.Metrics.ShadowDenials.WithLabelValues(rt.OperationID, n).Inc()
		}
	}
	if call.headers == nil {
		call.headers = http.Header{}
	}
	hdr := http.Header{}
	l.setHeaders(hdr, e)
	for k, v := range hdr {
		call.headers[k] = append(call.headers[k], v...)
	}
	st := l.descriptorStatus(e)
	if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
		if penalty := h.imposePenalty(ctx, c, rt, l, s.Pseudonym, e); penalty > 0 {
			st.DurationUntilReset = durationpb.New(penalty)
		}
	}
	return st, nil
}

// plannedPerRequest reports whether a subject of kind has its plan from
// the request (a trusted proxy's plan header, a token's plan claim) rather
// than from the configuration (an API key's line).
func plannedPerRequest(kind subject.Kind) bool {
	return kind == subject.Principal || kind == subject.JWT
}

// rlsPlan is named, the value matched to the rule's plan entry, spaces
// trimmed as a plan header's are, when the rule has one and its route
// maps that plan; else "": a plan the route does not map earns the budget
// of no plan, as on the request path, and a plan entry the rule does not
// name is no part of the decision.
func rlsPlan(rule *rlsRule, named string) string {
	named = strings.TrimSpace(named)
	if rule.planAt < 0 || !rule.route.mapsPlan(named) {
		return ""
	}
	return named
}

// repeatsKey reports whether more than one of pairs has key.
func repeatsKey(pairs []descriptorPair, key string) bool {
	seen := false
	for _, p := range pairs {
		if p.key == key {
			if seen {
				return true
			}
			seen = true
		}
	}
	return false
}

// maxCost is the least max_cost of l's policies.
func (l *limits) maxCost() int64 {
	least := l.policies[0].MaxCost
	for _, p := range l.policies[1:] {
		least = min(least, p.MaxCost)
	}
	return least
}

// descriptorStatus is what a descriptor's answer says of e: its code, and
// the enforced policy with the least left (the one that refused, when one
// did) as its limit.
func (l *limits) descriptorStatus(e limiter.Evaluated) *rlsv3.RateLimitResponse_DescriptorStatus {
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	if !l.admits(e) {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	at := -1
	for i, p := range l.policies {
		if p.Shadow {
			continue
		}
		d := e.PolicyDecision(i)
		if at < 0 || !d.Allowed && e.PolicyDecision(at).Allowed || d.Allowed == e.PolicyDecision(at).Allowed && d.Remaining < e.PolicyDecision(at).Remaining {
			at = i
		}
	}
	if at < 0 {
		return st
	}
	d := e.PolicyDecision(at)
	st.CurrentLimit = currentLimit(l.policies[at], d)
	st.LimitRemaining = uint32(min(max(d.Remaining, 0), 1<<32-1))
	st.DurationUntilReset = durationpb.New(max(d.ResetAfter, 0))
	return st
}

// rlsUnits are Envoy's units of a limit's period that a window divides
// into, longest first.
var rlsUnits = []struct {
	unit rlsv3.RateLimitResponse_RateLimit_Unit
	d    time.Duration
}{
	{rlsv3.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	{rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second},
}

// currentLimit is p's quota per its period in Envoy's terms: a calendar
// period is its unit; any other period the longest unit that divides it,
// times the multiplier (10 per 5 minutes is 10 per MINUTE × 5). A period
// of no whole seconds is its rate per second, rounded down.
func currentLimit(p *limiter.Policy, d limiter.Decision) *rlsv3.RateLimitResponse_RateLimit {
	rl := &rlsv3.RateLimitResponse_RateLimit{Name: p.Name, RequestsPerUnit: uint32(min(max(d.Limit, 0), 1<<32-1))}
	switch p.Calendar {
	case limiter.CalendarDay:
		rl.Unit = rlsv3.RateLimitResponse_RateLimit_DAY
		return rl
	case limiter.CalendarWeek:
		rl.Unit = rlsv3.RateLimitResponse_RateLimit_WEEK
		return rl
	case limiter.CalendarMonth:
		rl.Unit = rlsv3.RateLimitResponse_RateLimit_MONTH
		return rl
	}
	period := p.Period()
	for _, u := range rlsUnits {
		if period >= u.d && period%u.d == 0 {
			rl.Unit = u.unit
			if n := period / u.d; n > 1 {
				rl.UnitMultiplier = wrapperspb.UInt32(uint32(min(n, 1<<32-1)))
			}
			return rl
		}
	}
	rl.Unit = rlsv3.RateLimitResponse_RateLimit_SECOND
	rl.RequestsPerUnit = uint32(min(max(d.Limit, 0)*int64(time.Second)/max(int64(period), 1), 1<<32-1))
	return rl
}
