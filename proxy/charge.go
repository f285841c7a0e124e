package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgegate/gateway/limiter"
)

// responseCharge is one policy of a route charged by the upstream's
// response, compiled: the limiter reserves for it before forwarding with
// the route's other policies, and the response says what it costs.
type responseCharge struct {
	policy   *limiter.Policy
	index    int // the policy's place in the route's set: what the admission settles
	name     string
	statuses *limiter.Statuses // nil when header says the cost
	header   string            // the cost header's canonical name
}

// maxCharges is the most policies charged by the response a route may
// have: a settlement marks each settled in a word.
const maxCharges = 64

func newResponseCharges(ps []*limiter.Policy) ([]responseCharge, error) {
	var charges []responseCharge
	for i, p := range ps {
		if !p.ChargedByResponse() {
			continue
		}
		ch := responseCharge{policy: p, index: i, name: p.Name}
		if p.CostHeader != "" {
			ch.header = textproto.CanonicalMIMEHeaderKey(p.CostHeader)
		} else {
			ch.statuses = &p.CountStatuses
		}
		charges = append(charges, ch)
	}
	if len(charges) > maxCharges {
		return nil, fmt.Errorf("%d policies charged by the response; a route may have %d", len(charges), maxCharges)
	}
	return charges, nil
}

// settlement is one request's charges after its response: made when the
// limiter admitted a request whose policies include some charged by the
// response (each holding its reserve), filled by the forwarder when the
// upstream's head arrives, and finished when the exchange ends. Each
// policy is settled once (limiter.Admitted.Settlement), as soon as its
// cost is known: a status at the head, a cost header at the end of the
// body, when no trailer can add to it; beside the response rather than
// before it. An answer the gateway wrote instead, or none, costs 0: the
// reserve goes back. finish waits for every settlement before the
// request ends, so that none outlives its request and the next request
// on the connection sees it.
type settlement struct {
	h        *Handler
	limiter  Limiter // the one that admitted the request, whatever a reload brings
	admitted *limiter.Admitted
	charges  []responseCharge
	subject  string
	route    string
	timeout  time.Duration
	ctx      context.Context
	// settled marks each charge settled, by its index in charges.
	settled uint64
	// headed: the upstream's head arrived (status is its code).
	headed bool
	status int
	// pending are the charges by a header whose trailer may still add to
	// their cost.
	pending []pendingCost
	wg      sync.WaitGroup
	// The upstream exchange outlives its client (see readOn): cancel ends
	// it; unwatch stops the watch of the client; giveUp is the timer that
	// bounds it once the client has left.
	cancel  context.CancelFunc
	unwatch func() bool
	giveUp  atomic.Pointer[time.Timer]
}

// maxReadOn bounds the body the gateway reads, and discards, for a cost
// trailer once the client has gone.
const maxReadOn = 16 << 20

// byHeader reports whether a charge takes its cost from a header, which
// may come as a trailer.
func byHeader(charges []responseCharge) bool {
	for i := range charges {
		if charges[i].header != "" {
			return true
		}
	}
	return false
}

// readOn is the context of the exchange with the upstream: the client's
// values, and its end only bound later than before: a client that leaves
// before the cost trailer does not decide the cost, so the exchange goes
// on for bound at most once the client has gone (the trailer's body
// reads on in trailerBody). finish ends it.
func (s *settlement) readOn(client context.Context, bound time.Duration) context.Context {
	ctx, cancel := context.WithCancel(context.WithoutCancel(client))
	s.cancel = cancel
	s.unwatch = context.AfterFunc(client, func() { s.giveUp.Store(time.AfterFunc(bound, cancel)) })
	return context.WithValue(ctx, settlementKey{}, s)
}

// settlementKey carries a settlement in the context of an exchange that
// reads on to its trailer.
type settlementKey struct{}

// readingOn returns the settlement of a response whose cost may come in a
// trailer; nil for any other.
func readingOn(res *http.Response) *settlement {
	s, _ := res.Request.Context().Value(settlementKey{}).(*settlement)
	return s
}

// mayTrail reports whether res can end with a trailer: an HTTP/2 or
// HTTP/3 response, or a chunked HTTP/1.1 one. Another's costs are all in
// its head (settlement.finish).
func mayTrail(res *http.Response) bool {
	return res.ProtoMajor >= 2 || slices.Contains(res.TransferEncoding, "chunked")
}

// trailerBody is an upstream's body whose trailer may carry costs: they
// are charged at its end. Closed before its end (the client left, or the
// copy to it failed), the body is read on, up to maxReadOn, to its
// trailer; what ends it sooner (the bound of readOn, the upstream)
// settles as unfinished says.
type trailerBody struct {
	io.ReadCloser
	res   *http.Response
	s     *settlement
	ended bool
}

func (b *trailerBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.ended {
		b.ended = true
		b.s.trailers(b.res.Trailer)
	}
	return n, err
}

func (b *trailerBody) Close() error {
	if !b.ended && len(b.s.pending) > 0 {
		b.ended = true
		if _, err := io.CopyN(io.Discard, b.ReadCloser, maxReadOn+1); err == io.EOF {
			b.s.trailers(b.res.Trailer)
		} else {
			b.s.unfinished()
		}
	}
	return b.ReadCloser.Close()
}

// pendingCost is a charge by a header that a trailer may add to: i is
// its index in the charges, and the head said cost, if it said anything
// (inHead), and whether it announced the header as a trailer.
type pendingCost struct {
	i         int
	cost      int64
	inHead    bool
	announced bool
}

// head takes what the upstream's final response head says: the status,
// which settles each charge by status, and each cost header, removed
// before the client sees it, as is its announcement as a trailer. A
// trailer of the same name adds to the head's cost.
func (s *settlement) head(code int, h http.Header) {
	s.headed, s.status = true, code
	for i := range s.charges {
		ch := &s.charges[i]
		if ch.statuses != nil {
			cost := int64(0)
			if ch.statuses.Has(code) {
				cost = 1
			}
			s.settle(i, cost)
			continue
		}
		p := pendingCost{i: i, announced: unannounce(h, ch.header)}
		if v, ok := h[ch.header]; ok {
			delete(h, ch.header)
			p.cost, p.inHead = s.cost(ch, v), true
		}
		s.pending = append(s.pending, p)
	}
}

// trailers settles each cost header at what the upstream's trailers say,
// added to what the head said, removing the costs before the forwarder
// hands the rest to the client. A cost neither the head nor the trailer
// states charges 1.
func (s *settlement) trailers(t http.Header) {
	for _, p := range s.pending {
		ch := &s.charges[p.i]
		v, ok := t[ch.header]
		delete(t, ch.header)
		switch {
		case ok:
			s.settle(p.i, min(p.cost+s.cost(ch, v), ch.policy.MaxCost))
		case !p.inHead:
			s.settle(p.i, s.cost(ch, nil))
		default:
			s.settle(p.i, p.cost)
		}
	}
	s.pending = nil
}

// unfinished settles at max_cost each cost of a trailer that never came
// because the body did not end: one the head announced, or whose cost it
// did not state. A cost the head stated without announcing a trailer
// stays as it was.
func (s *settlement) unfinished() {
	for _, p := range s.pending {
		ch := &s.charges[p.i]
		if p.inHead && !p.announced {
			s.settle(p.i, p.cost)
			continue
		}
		s.h.opts.Logger.LogAttrs(s.ctx, slog.LevelInfo, "cost trailer never came; charged max_cost",
			slog.String("route", s.route), slog.String("policy", ch.name))
		s.settle(p.i, ch.policy.MaxCost)
	}
	s.pending = nil
}

// finish settles each cost whose trailer could not come (a response
// without a body: 1, or what the head said), and at 0 each charge the
// upstream never answered (the gateway answered, or nobody did), ends the
// exchange's context, and waits for every settlement of the request.
func (s *settlement) finish() {
	s.trailers(nil)
	for i := range s.charges {
		s.settle(i, 0)
	}
	if s.cancel != nil {
		s.unwatch()
		s.cancel()
		if t := s.giveUp.Load(); t != nil {
			t.Stop()
		}
	}
	s.wg.Wait()
}

// cost reads a cost's fields: each line, and each member of a
// comma-separated list in a line, is a whole number, and they charge
// their sum, at most max_cost (a number beyond 64 bits included); 0
// charges nothing. No member, or any that is not a whole number (a
// negative one included), costs 1 and is counted.
func (s *settlement) cost(ch *responseCharge, v []string) int64 {
	sum, members := int64(0), 0
	for _, line := range v {
		for m := range strings.SplitSeq(line, ",") {
			m = textproto.TrimString(m)
			if m == "" {
				continue // an empty list member, which RFC 9110 has ignored
			}
			n, ok := parseCost(m)
			if !ok {
				return s.invalidCost(ch)
			}
			members++
			sum = min(sum+min(n, ch.policy.MaxCost), ch.policy.MaxCost)
		}
	}
	if members == 0 {
		return s.invalidCost(ch)
	}
	return sum
}

// parseCost reads a whole number of ASCII digits; one beyond 64 bits is
// math.MaxInt64.
func parseCost(m string) (int64, bool) {
	for i := 0; i < len(m); i++ {
		if m[i] < '0' || m[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(m, 10, 64)
	if err != nil {
		return math.MaxInt64, true // only a range error is left
	}
	return n, true
}

// invalidCost counts a missing or malformed cost, which charges 1.
func (s *settlement) invalidCost(ch *responseCharge) int64 {
	if m := s.h.opts.Metrics; m != nil {
		m.CostHeaderInvalid.WithLabelValues(s.route, ch.name).Inc()
	}
	return 1
}

// settle settles the i-th charge at cost beside the response, unless it
// is settled already. A failure changes nothing the client gets: it is
// logged and counted.
func (s *settlement) settle(i int, cost int64) {
	if s.settled&(1<<i) != 0 || s.admitted == nil {
		return
	}
	s.settled |= 1 << i
	ch := &s.charges[i]
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		req := s.admitted.Settlement(ch.index, cost)
		req.EvaluationID, req.NewID, req.Deadline = s.h.evalIDs.next(), true, time.Now().Add(s.timeout)
		o := s.limiter.Evaluate(s.ctx, req)
		if _, ok := o.(limiter.Evaluated); ok {
			return
		}
		s.h.opts.Logger.LogAttrs(s.ctx, slog.LevelWarn, "limiter charge failed",
			slog.String("route", s.route), slog.String("policy", ch.name), slog.String("outcome", limiter.OutcomeName(o)))
		if m := s.h.opts.Metrics; m != nil {
			m.ChargeFailures.WithLabelValues(s.route, ch.name).Inc()
		}
	}()
}

// unannounce removes name from the Trailer header's list, so that the
// client is not told of a trailer it will not get, and reports whether
// the list held it.
func unannounce(h http.Header, name string) (announced bool) {
	vs, ok := h["Trailer"]
	if !ok {
		return false
	}
	var kept []string
	for _, v := range vs {
		for _, n := range strings.Split(v, ",") {
			switch n = strings.TrimSpace(n); {
			case strings.EqualFold(n, name):
				announced = true
			case n != "":
				kept = append(kept, n)
			}
		}
	}
	if len(kept) == 0 {
		delete(h, "Trailer")
	} else {
		h["Trailer"] = []string{strings.Join(kept, ", ")}
	}
	return announced
}
