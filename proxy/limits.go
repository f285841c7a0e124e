package proxy

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/edgegate/gateway/limiter"
)

// limits is a route's policies, compiled: the request the limiter is asked
// and the header values every answer shares. A route has one policy
// (policy = "x") or several decided at once (policies = [...]); either way
// any of them may be a shadow policy, which is decided and charged but
// never changes the answer.
type limits struct {
	policies []*limiter.Policy
	// multi: asked as Request.Policies; otherwise as Request.Policy.
	multi bool
	// shadowOnly: no policy is enforced, so nothing the limiter says (or
	// fails to say) keeps a request from the upstream.
	shadowOnly bool
	// names are the policy names as Structured Field strings, by position.
	names []string
	// policyHeader is the RateLimit-Policy value: one list member per
	// enforced policy, in route order; nil when shadowOnly.
	policyHeader []string
	// problem429 is the 429 body of a one-policy route.
	problem429 []byte
}

func newLimits(ps []*limiter.Policy) (*limits, error) {
	l := &limits{policies: ps, multi: len(ps) > 1, shadowOnly: true}
	seen := map[string]bool{}
	var members []string
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
		}
	}
	if len(members) > 0 {
		l.policyHeader = []string{strings.Join(members, ", ")}
	}
	if !l.multi {
		l.problem429 = quotaProblem([]string{ps[0].Name})
	}
	return l, nil
}

// setHeadersAll sets RateLimit-Policy and RateLimit for a route with
// several policies: one member per enforced policy, in route order.
func (l *limits) setHeadersAll(h http.Header, each []limiter.Decision) {
	if l.policyHeader == nil {
		return
	}
	b := make([]byte, 0, 48*len(l.policies))
	for i, p := range l.policies {
		if p.Shadow {
			continue
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = appendRateLimitMember(b, l.names[i], each[i])
	}
	h["Ratelimit-Policy"] = l.policyHeader
	h["Ratelimit"] = []string{string(b)}
}

// violated lists the enforced policies that denied, in route order.
func (l *limits) violated(each []limiter.Decision) []string {
	var names []string
	for i, p := range l.policies {
		if !p.Shadow && !each[i].Allowed {
			names = append(names, p.Name)
		}
	}
	return names
}

// shadowDenials lists the shadow policies that would have denied.
func (l *limits) shadowDenials(each []limiter.Decision) []string {
	var names []string
	for i, p := range l.policies {
		if p.Shadow && !each[i].Allowed {
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
