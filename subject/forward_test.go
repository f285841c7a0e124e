package subject_test

import (
	"crypto/tls"
	"net/http/httputil"
	"reflect"
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

// SetForwarded writes what ProxyRequest.SetXForwarded writes, the kept
// proto aside, and its values are each their own slice.
func TestSetForwardedWritesWhatSetXForwardedWrites(t *testing.T) {
	for _, c := range []struct {
		remote, xff, proto string
		tls                bool
	}{
		{"203.0.113.7:5000", "", "", false},
		{"203.0.113.7:5000", "198.51.100.4", "", true},
		{"[2001:db8::1]:443", "198.51.100.4, 10.0.0.1", "", false},
		{"not an address", "198.51.100.4", "", true},
		{"203.0.113.7:5000", "", "https", false},
		{"203.0.113.7:5000", "", "http", true},
		{"203.0.113.7:5000", "", "gopher", true},
	} {
		req := request(c.remote)
		req.Host = "api.example:8080"
		if c.tls {
			req.TLS = &tls.ConnectionState{}
		}
		if c.xff != "" {
			req.Header.Set("X-Forwarded-For", c.xff)
		}
		if c.proto != "" {
			req.Header.Set("X-Forwarded-Proto", c.proto)
		}
		got := &httputil.ProxyRequest{In: req, Out: req.Clone(req.Context())}
		want := &httputil.ProxyRequest{In: req, Out: req.Clone(req.Context())}
		for _, pr := range []*httputil.ProxyRequest{got, want} {
			pr.Out.Header.Del("X-Forwarded-For")
			pr.Out.Header.Del("X-Forwarded-Proto")
		}
		subject.SetForwarded(got)
		if v := req.Header["X-Forwarded-For"]; len(v) > 0 {
			want.Out.Header["X-Forwarded-For"] = v
		}
		want.SetXForwarded()
		if c.proto == "http" || c.proto == "https" {
			want.Out.Header.Set("X-Forwarded-Proto", c.proto)
		}
		if !reflect.DeepEqual(got.Out.Header, want.Out.Header) {
			t.Errorf("%+v: got %v, want %v", c, got.Out.Header, want.Out.Header)
		}
		got.Out.Header["X-Forwarded-For"] = append(got.Out.Header["X-Forwarded-For"], "x")
		if h := got.Out.Header["X-Forwarded-Host"]; len(h) != 1 || h[0] != req.Host {
			t.Errorf("%+v: an append to X-Forwarded-For wrote X-Forwarded-Host %q", c, h)
		}
	}
}
