package proxy

import (
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/edgegate/gateway/overload"
	"github.com/edgegate/gateway/subject"
)

// exchange is what one request leaves for the access log and the metrics.
type exchange struct {
	route       string
	subjectKind subject.Kind
	pseudonym   string
	outcome     string
	reason      string // why a token was refused, from a fixed set
	upstream    time.Duration
	// shadowDenied names the shadow policies that would have denied (or,
	// for outcome shadow_delayed, delayed).
	shadowDenied string
	// delay is how long the request was held (delayed, or client_closed
	// while held), or a shadow policy would have held it.
	delay  time.Duration
	target string         // the target the request went to last
	fw     *forwardWriter // lent by the capture
	// plan is the subject's plan as logged and counted: a name from the
	// configuration, "other" for a plan it does not know, "" for none.
	plan string
	// metrics are the matched route's series, or the unmatched requests'
	// (nil without metrics).
	metrics *routeMetrics
	// forwarded: the request was handed to the upstream forwarder, so the
	// limiter (or a route without one) let it through.
	forwarded bool
	// aborted: the client left before the response head (logged 499).
	aborted bool
	// lease is held from the decision until the response is complete;
	// nil when the request holds none.
	lease *lease
	// in is the request as the resolver sees it, its peer's trust worked
	// out once for the subject, the client and the forwarding headers.
	in subject.Inbound
	// span is the request's server span (nil without a tracer); limits
	// are the policies the limiter was asked about (nil if it was not),
	// and decision its answer as limiter.OutcomeName says it.
	span     trace.Span
	limits   *limits
	decision string
	method   string // as the access log names it; set only with a span
	// settling is the request's charges after its response, when the
	// limiter admitted it with policies charged by the response.
	settling *settlement
	// admission is the request's slot of its pool's overload controller,
	// held from before it is forwarded until the exchange ends (the zero
	// Admission: none).
	admission overload.Admission
}

// endAdmission frees the request's slot of its pool; the exchange's
// latency counts toward the pool's adaptive limit when it is the pool's
// (an answer, a timeout, a failure no faster than the pool unloaded): not
// when the client left, the gateway answered for the client's fault or no
// target took the request (forwardWriter.unmeasured), or it became a
// tunnel, whose life says nothing of the backend's speed.
func (x *exchange) endAdmission(r *http.Request, cw *capture) {
	switch {
	case r.Context().Err() != nil || cw.tunnel != nil || x.fw.unmeasured:
		x.admission.Abandon()
	case x.fw.failed:
		x.admission.Fail()
	default:
		x.admission.Release()
	}
}

// record counts a request in the metrics and writes its access log line;
// aborted says that its response was cut off. A request that forwarded
// nothing is logged at most once a second per route, client and outcome
// (edge.LogThrottle), and no field of a line is longer than maxLogField.
func (h *Handler) record(r *http.Request, c *compiled, x *exchange, code int, written int64, start time.Time, aborted bool) {
	now := time.Now()
	took := now.Sub(start)
	if h.opts.Metrics != nil {
		x.metrics.observe(x.outcome, x.plan, code, took)
	}
	if x.span != nil {
		h.tracing.endServer(x, code, aborted)
	}
	if h.opts.AccessLog {
		var notLogged slog.Attr // empty, and so left out, but after a flood
		if !x.forwarded {
			k := refusalLogKey{route: x.route, outcome: x.outcome, reason: x.reason, pseudonym: x.pseudonym}
			if k.pseudonym == "" {
				k.client = x.in.Client()
			}
			log, skipped := h.refusals.Admit(k)
			if !log {
				return
			}
			if skipped > 0 {
				notLogged = slog.Int64("not_logged", skipped)
			}
		}
		logger := h.opts.Logger.Handler()
		ctx := r.Context()
		if !logger.Enabled(ctx, slog.LevelInfo) {
			return
		}
		// The record is made here rather than by Logger.LogAttrs, which
		// would read the clock again and the caller's PC (for a source
		// the gateway's handler never writes), and hand the handler every
		// attribute, the empty ones it skips included.
		line := slog.NewRecord(now, slog.LevelInfo, "request", 0)
		var attrs [16]slog.Attr
		a := append(attrs[:0],
			slog.String("route", clampField(x.route)),
			slog.String("method", clampField(c.router.methodName(r.Method))),
			slog.String("subject_kind", x.subjectKind.String()),
			slog.String("pseudonym", x.pseudonym))
		if x.plan != "" {
			a = append(a, slog.String("plan", clampField(x.plan)))
		}
		a = append(a, slog.String("outcome", x.outcome))
		if x.reason != "" {
			a = append(a, slog.String("reason", x.reason))
		}
		a = append(a,
			slog.Int("status", code),
			slog.Int64("bytes", written),
			slog.Duration("duration", took),
			slog.Duration("upstream_duration", x.upstream),
			slog.String("target", clampField(x.target)))
		if notLogged.Key != "" {
			a = append(a, notLogged)
		}
		if x.shadowDenied != "" {
			a = append(a, slog.String("policy", clampField(x.shadowDenied)))
		}
		if x.delay != 0 {
			a = append(a, slog.Int64("delay_ms", x.delay.Milliseconds()))
		}
		if aborted {
			a = append(a, slog.Bool("aborted", true))
		}
		line.AddAttrs(a...)
		_ = logger.Handle(ctx, line)
	}
}

func errAttr(err error) slog.Attr {
	if err == nil {
		return slog.Attr{}
	}
	return slog.String("error", err.Error())
}
