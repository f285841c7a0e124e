package subject_test

import (
	"net/http/httputil"
	"testing"

	"github.com/edgegate/gateway/subject"
)

// What the upstream is told follows from the one trust decision made for
// the request: a trusted proxy's forwarding and principal headers go on,
// anyone else's are gone before the request is forwarded.
func TestForwardingHeadersFollowTheRequestsOneTrustDecision(t *testing.T) {
	r := newResolver(t)
	for _, c := range []struct {
		peer    string
		trusted bool
		xff     string
	}{
		{"10.0.0.9:5000", true, "198.51.100.4, 10.0.0.9"},
		{"203.0.113.7:5000", false, "203.0.113.7"},
	} {
		req := request(c.peer, "X-Forwarded-For", "198.51.100.4", "X-Forwarded-Proto", "https",
			"X-Auth-Principal", "alice", "X-Real-Ip", "198.51.100.4")
		in := r.Inbound(req)
		s, err := in.Resolve(subject.Query{Sources: []subject.Kind{subject.Principal, subject.ClientIP}, OperationID: "op"})
		if err != nil {
			t.Fatal(err)
		}
		if (s.Kind == subject.Principal) != c.trusted {
			t.Errorf("%s: resolved as %v", c.peer, s.Kind)
		}
		in.Believe()
		pr := &httputil.ProxyRequest{In: req, Out: req.Clone(req.Context())}
		// ReverseProxy drops the inbound forwarding headers from Out
		// before Rewrite.
		pr.Out.Header.Del("X-Forwarded-For")
		pr.Out.Header.Del("X-Forwarded-Proto")
		subject.SetForwarded(pr)
		h := pr.Out.Header
		if got := h.Get("X-Forwarded-For"); got != c.xff {
			t.Errorf("%s: X-Forwarded-For %q, want %q", c.peer, got, c.xff)
		}
		wantProto, wantPrincipal := "http", ""
		if c.trusted {
			wantProto, wantPrincipal = "https", "alice"
		}
		if got := h.Get("X-Forwarded-Proto"); got != wantProto {
			t.Errorf("%s: X-Forwarded-Proto %q, want %q", c.peer, got, wantProto)
		}
		if got := h.Get("X-Auth-Principal"); got != wantPrincipal {
			t.Errorf("%s: principal %q, want %q", c.peer, got, wantPrincipal)
		}
		if got := h.Get("X-Real-Ip"); (got != "") != c.trusted {
			t.Errorf("%s: X-Real-Ip %q", c.peer, got)
		}
	}
}
