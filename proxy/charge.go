package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/edgegate/gateway/limiter"
)

// responseCharge is one policy of a route charged by the upstream's
// response, compiled: the limiter checks it before forwarding with the
// route's other policies, and the response says what it costs.
type responseCharge struct {
	policy   *limiter.Policy
	alone    *limiter.PolicySet // the policy, a set of one: a settlement's Request.Policies
	name     string
	statuses *limiter.Statuses // nil when header says the cost
	header   string            // the cost header's canonical name
}

func newResponseCharges(ps []*limiter.Policy) ([]responseCharge, error) {
	var charges []responseCharge
	for _, p := range ps {
		if !p.ChargedByResponse() {
			continue
		}
		alone, err := limiter.NewPolicySet(p)
		if err != nil {
			return nil, err
		}
		ch := responseCharge{policy: p, alone: alone, name: p.Name}
		if p.CostHeader != "" {
			ch.header = textproto.CanonicalMIMEHeaderKey(p.CostHeader)
		} else {
			ch.statuses = &p.CountStatuses
		}
		charges = append(charges, ch)
	}
	return charges, nil
}

// settlement is one request's charges after its response: made when the
// limiter admitted a request whose policies include some charged by the
// response, filled by the forwarder when the upstream's head arrives, and
// finished by serve at the end of the body. Each charge is sent as soon as
// its cost is known (at the head, or at the end of the body for a
// trailer), beside the response rather than before it; serve waits for
// them before it returns, so that no charge outlives its request and the
// next request on the connection sees it.
type settlement struct {
	h       *Handler
	limiter Limiter // the one that admitted the request, whatever a reload brings
	charges []responseCharge
	subject string
	route   string
	timeout time.Duration
	ctx     context.Context
	// headed: the upstream's head arrived (status is its code). An answer
	// the gateway wrote instead charges nothing.
	headed bool
	status int
	// pending are the charges whose cost comes in a trailer, by index.
	pending []int
	wg      sync.WaitGroup
}

// head takes what the upstream's final response head says: the status,
// and each cost header, removed before the client sees it, as is its
// announcement as a trailer.
func (s *settlement) head(code int, h http.Header) {
	s.headed, s.status = true, code
	for i := range s.charges {
		ch := &s.charges[i]
		if ch.statuses != nil {
			if ch.statuses.Has(code) {
				s.charge(ch, 1)
			}
			continue
		}
		unannounce(h, ch.header)
		if v, ok := h[ch.header]; ok {
			delete(h, ch.header)
			s.charge(ch, s.cost(ch, v))
			continue
		}
		s.pending = append(s.pending, i)
	}
}

// finish charges what the trailers say, removing them, and waits for
// every charge of the request. h is the response's header map, where the
// forwarder put the upstream's trailers.
func (s *settlement) finish(h http.Header) {
	if s.headed {
		for _, i := range s.pending {
			ch := &s.charges[i]
			v, ok := h[ch.header]
			if !ok {
				v, ok = h[http.TrailerPrefix+ch.header]
			}
			delete(h, ch.header)
			delete(h, http.TrailerPrefix+ch.header)
			if !ok {
				v = nil
			}
			s.charge(ch, s.cost(ch, v))
		}
	}
	s.wg.Wait()
}

// cost reads a cost header's values: one integer, at most max_cost; 0
// charges nothing. A missing or malformed value costs 1 and is counted.
func (s *settlement) cost(ch *responseCharge, v []string) int64 {
	if len(v) == 1 {
		if n, err := strconv.ParseInt(strings.TrimSpace(v[0]), 10, 64); err == nil && n >= 0 {
			return min(n, ch.policy.MaxCost)
		}
	}
	if m := s.h.opts.Metrics; m != nil {
		m.CostHeaderInvalid.WithLabelValues(s.route, ch.name).Inc()
	}
	return 1
}

// charge settles cost on ch's policy beside the response. A failure
// changes nothing the client gets: it is logged and counted.
func (s *settlement) charge(ch *responseCharge, cost int64) {
	if cost == 0 {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		req := limiter.Request{
			Policies:     ch.alone,
			Subject:      s.subject,
			Cost:         cost,
			EvaluationID: s.h.evalIDs.next(),
			NewID:        true,
			Deadline:     time.Now().Add(s.timeout),
			Phase:        limiter.Settlement,
		}
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
// client is not told of a trailer it will not get.
func unannounce(h http.Header, name string) {
	vs, ok := h["Trailer"]
	if !ok {
		return
	}
	var kept []string
	for _, v := range vs {
		for _, n := range strings.Split(v, ",") {
			if n = strings.TrimSpace(n); n != "" && !strings.EqualFold(n, name) {
				kept = append(kept, n)
			}
		}
	}
	if len(kept) == 0 {
		delete(h, "Trailer")
		return
	}
	h["Trailer"] = []string{strings.Join(kept, ", ")}
}
