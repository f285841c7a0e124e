package proxy

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/edgegate/gateway/limiter"
)

// limits is a route's policies, compiled: the request the limiter is asked
// and the header values every answer shares. A route's limit is a list of
// policies (policy = "x" is a list of one), decided at once; any of them
// may be a shadow policy, which is decided and charged but never changes
// the answer.
type limits struct {
	policies []*limiter.Policy
	// shadowOnly: no policy is enforced, so nothing the limiter says (or
	// fails to say) keeps a request from the upstream.
	shadowOnly bool
	// names are the policy names as Structured Field strings, by position.
	names []string
	// policyHeader is the RateLimit-Policy value: one list member per
	// enforced policy, in route order; nil when shadowOnly.
	policyHeader []string
	// enforced counts the enforced policies; problem429 is the 429 body
	// when every one of them denied, as the only one of a route always does.
	enforced   int
	problem429 []byte
}

func newLimits(ps []*limiter.Policy) (*limits, error) {
	l := &limits{policies: ps, shadowOnly: true}
	seen := map[string]bool{}
	var members, enforced []string
	for _, p := range ps {
		if p == nil {
			return nil, fmt.Errorf("proxy: a nil policy")
		}
		if err := p.Validate(); err != nil {
			return nil, err
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("proxy: policy %q listed twice", p.Name)
		}
		seen[p.Name] = true
		l.names = append(l.names, sfString(p.Name))
		if !p.Shadow {
			l.shadowOnly = false
			members = append(members, policyMember(p))
			enforced = append(enforced, p.Name)
		}
	}
	if len(members) > 0 {
		l.policyHeader = []string{strings.Join(members, ", ")}
	}
	l.enforced = len(enforced)
	l.problem429 = quotaProblem(enforced)
	return l, nil
}

// setHeaders sets RateLimit-Policy and RateLimit: one member per enforced
// policy, in route order. Headers the upstream sends later are added
// beside ours: both are Structured Field lists, so the client sees every
// policy.
func (l *limits) setHeaders(h http.Header, o limiter.Evaluated) {
	if l.policyHeader == nil {
		return
	}
	var buf [160]byte
	b := buf[:0]
	for i, p := range l.policies {
		if p.Shadow {
			continue
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = appendRateLimitMember(b, l.names[i], o.PolicyDecision(i))
	}
	h["Ratelimit-Policy"] = l.policyHeader
	h["Ratelimit"] = []string{string(b)}
}

// admits reports whether the request may go on: every enforced policy
// allowed.
func (l *limits) admits(o limiter.Evaluated) bool {
	return o.Allowed || l.shadowOnly
}

// problem is the 429 body naming the enforced policies that denied, in
// route order.
func (l *limits) problem(o limiter.Evaluated) []byte {
	violated := func(i int) bool { return !l.policies[i].Shadow && !o.PolicyDecision(i).Allowed }
	n := 0
	for i := range l.policies {
		if violated(i) {
			n++
		}
	}
	if n == l.enforced {
		return l.problem429
	}
	names := make([]string, 0, n)
	for i, p := range l.policies {
		if violated(i) {
			names = append(names, p.Name)
		}
	}
	return quotaProblem(names)
}

// shadowDenials lists the shadow policies that would have denied.
func (l *limits) shadowDenials(o limiter.Evaluated) []string {
	var names []string
	for i, p := range l.policies {
		if p.Shadow && !o.PolicyDecision(i).Allowed {
			names = append(names, p.Name)
		}
	}
	return names
}

func appendRateLimitMember(b []byte, name string, d limiter.Decision) []byte {
	b = append(b, name...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, max(d.Remaining, 0), 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, ceilSeconds(d.ResetAfter), 10)
}
