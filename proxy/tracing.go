package proxy

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// tracing starts the spans of a request: a server span for the request, a
// child for the limiter's decision and one for each upstream attempt, and
// writes the W3C trace context on the request sent upstream. A Handler
// without a tracer has none, and then nothing of this file runs: the
// request path costs what it did.
//
// No attribute holds an identity: no client address, key, principal or
// pseudonym, and no path or query (they may name a user; the access log
// holds neither). The method is named as the access log names it.
type tracing struct {
	tracer     trace.Tracer
	propagator propagation.TraceContext
}

// Attributes of the gateway's own, beside the HTTP conventions.
const (
	attrRoute          = attribute.Key("gateway.route")           // the route block's name
	attrOutcome        = attribute.Key("gateway.outcome")         // as gateway_requests_total counts it
	attrLimiterOutcome = attribute.Key("gateway.limiter.outcome") // the limiter's answer
	attrLimiterPolicy  = attribute.Key("gateway.limiter.policy")  // the policies asked, comma-separated
	attrPool           = attribute.Key("gateway.upstream.pool")
	attrTarget         = attribute.Key("gateway.upstream.target") // a target URL of the configuration
)

// startServer starts r's server span, named by its method until a route
// matches. The caller's trace context is taken only from a trusted proxy:
// anyone else could choose which requests are sampled, or join its spans
// to another trace.
func (t *tracing) startServer(r *http.Request, method string, trustedPeer bool) (*http.Request, trace.Span) {
	ctx := r.Context()
	if trustedPeer {
		ctx = t.propagator.Extract(ctx, propagation.HeaderCarrier(r.Header))
	}
	scheme, version := "http", "1.1"
	if r.TLS != nil {
		scheme = "https"
	}
	switch {
	case r.ProtoMajor == 3:
		version = "3"
	case r.ProtoMajor == 2:
		version = "2"
	case r.ProtoMinor == 0:
		version = "1.0"
	}
	attrs := []attribute.KeyValue{
		semconv.HTTPRequestMethodKey.String(method),
		semconv.URLScheme(scheme),
		semconv.NetworkProtocolVersion(version),
	}
	if host := canonicalHost(r.Host); host != "" {
		attrs = append(attrs, semconv.ServerAddress(host))
	}
	ctx, span := t.tracer.Start(ctx, method, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	return r.WithContext(ctx), span
}

// routed names the server span by its method and route.
func (t *tracing) routed(span trace.Span, method string, rt *route) {
	span.SetName(method + " " + rt.OperationID)
	span.SetAttributes(semconv.HTTPRoute(rt.Path), attrRoute.String(rt.OperationID))
}

// endServer ends the server span with what the request came to.
func (t *tracing) endServer(x *exchange, code int, aborted bool) {
	span := x.span
	span.SetAttributes(semconv.HTTPResponseStatusCode(code), attrOutcome.String(x.outcome))
	if x.limits != nil {
		span.SetAttributes(attrLimiterOutcome.String(x.decision), attrLimiterPolicy.String(policyNames(x.limits)))
	}
	switch {
	case aborted:
		span.SetAttributes(semconv.ErrorTypeKey.String("aborted"))
		span.SetStatus(codes.Error, "response aborted")
	case code >= 500:
		// A server span's 4xx is the client's doing, not an error.
		span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(code)))
		span.SetStatus(codes.Error, "")
	}
	span.End()
}

// startLimiter starts the span of the limiter's decision over l.
func (t *tracing) startLimiter(ctx context.Context, l *limits) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, "limiter", trace.WithAttributes(attrLimiterPolicy.String(policyNames(l))))
}

// endLimiter ends the limiter's span with its answer.
func (t *tracing) endLimiter(span trace.Span, outcome string) {
	span.SetAttributes(attrLimiterOutcome.String(outcome))
	switch outcome {
	case "allowed", "denied", "fallback_allowed", "fallback_denied":
	default:
		span.SetStatus(codes.Error, outcome)
	}
	span.End()
}

// serveUpstream is member.serve within the client span of one attempt to
// send r to m; resend counts the attempts before it. The request goes on
// with the span's context, which the forwarder writes upstream (inject).
// The span ends however serve does, a response aborted with a panic
// included.
func (t *tracing) serveUpstream(rp *httputil.ReverseProxy, w http.ResponseWriter, r *http.Request, method string, p *pool, m *member, resend int) {
	attrs := []attribute.KeyValue{
		semconv.HTTPRequestMethodKey.String(method),
		attrPool.String(p.Name),
		attrTarget.String(m.name),
	}
	if host, port, err := net.SplitHostPort(m.url.Host); err == nil {
		attrs = append(attrs, semconv.ServerAddress(host))
		if n, err := strconv.Atoi(port); err == nil {
			attrs = append(attrs, semconv.ServerPort(n))
		}
	} else {
		attrs = append(attrs, semconv.ServerAddress(m.url.Hostname()))
	}
	if resend > 0 {
		attrs = append(attrs, semconv.HTTPRequestResendCount(resend))
	}
	ctx, span := t.tracer.Start(r.Context(), method, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	defer span.End()
	m.serve(rp, w, r.WithContext(ctx))
}

// upstreamAnswered records the status of the upstream's response on the
// span of the attempt that got it (res.Request's).
func upstreamAnswered(res *http.Response) {
	span := trace.SpanFromContext(res.Request.Context())
	span.SetAttributes(semconv.HTTPResponseStatusCode(res.StatusCode))
	if res.StatusCode >= 400 {
		span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(res.StatusCode)))
		span.SetStatus(codes.Error, "")
	}
}

// upstreamFailed records why an attempt got no response.
func upstreamFailed(r *http.Request, err error) {
	span := trace.SpanFromContext(r.Context())
	if !span.IsRecording() {
		return
	}
	cause := "other"
	if c, counted := classify(r, err); counted {
		cause = causeNames[c]
	}
	span.SetAttributes(semconv.ErrorTypeKey.String(cause))
	span.SetStatus(codes.Error, cause)
}

// inject writes the trace context of ctx on the request going upstream,
// in place of any the client sent.
func (t *tracing) inject(ctx context.Context, h http.Header) {
	delete(h, "Traceparent")
	delete(h, "Tracestate")
	t.propagator.Inject(ctx, propagation.HeaderCarrier(h))
}

func policyNames(l *limits) string {
	if len(l.policies) == 1 {
		return l.policies[0].Name
	}
	names := make([]string, len(l.policies))
	for i, p := range l.policies {
		names[i] = p.Name
	}
	return strings.Join(names, ",")
}
