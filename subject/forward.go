package subject

import (
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
)

// clientAddressHeaders are headers some upstreams read as the client's
// address or the URL it asked for. ReverseProxy already drops Forwarded and
// X-Forwarded-For/Host/Proto before Rewrite; these would pass.
var clientAddressHeaders = []string{
	"X-Real-Ip", "True-Client-Ip", "Cf-Connecting-Ip", "Fastly-Client-Ip",
	"X-Client-Ip", "X-Cluster-Client-Ip", "Client-Ip", "X-Original-Forwarded-For",
	"X-Forwarded-Port", "X-Forwarded-Server", "X-Forwarded-Scheme", "X-Forwarded-Ssl",
	"X-Original-Url", "X-Rewrite-Url", "X-Original-Host",
}

// ManagedHeaders are the request headers whose meaning the resolver
// decides: the forwarded header, the principal, API key and plan headers
// it reads, and the client-address headers it drops from untrusted peers.
// Defaults are applied as NewResolver applies them. Nothing else (a
// route's header rules) may set or remove them.
func (o Options) ManagedHeaders() []string {
	o = o.withDefaults()
	names := append([]string(nil), clientAddressHeaders...)
	for _, h := range []string{o.ForwardedHeader, o.PrincipalHeader, o.APIKeyHeader, o.PlanHeader} {
		if h != "" {
			names = append(names, http.CanonicalHeaderKey(h))
		}
	}
	return names
}

// ManagedHeaders are the resolver's Options.ManagedHeaders.
func (r *Resolver) ManagedHeaders() []string { return r.managed }

// Believe decides what the upstream may believe about who is asking, by
// the trust Resolve uses: from anyone but a trusted proxy it removes from
// the request the principal and plan headers, the configured forwarded
// header, X-Forwarded-For and X-Forwarded-Proto, and every client-address
// header, so that no client can assert an identity the limiter did not
// believe. SetForwarded then forwards what is left. The request path calls
// it once, after the request is resolved and before it is forwarded.
func (in Inbound) Believe() {
	if in.peerTrusted {
		return
	}
	h := in.req.Header
	for _, name := range clientAddressHeaders {
		delete(h, name)
	}
	if in.r.principalHeader != "" {
		delete(h, in.r.principalHeader)
	}
	if in.r.planHeader != "" {
		delete(h, in.r.planHeader)
	}
	delete(h, in.r.forwardedHeader)
	delete(h, "X-Forwarded-For")
	delete(h, "X-Forwarded-Proto")
}

// SetForwarded writes on pr.Out what the upstream may believe, from a
// pr.In that Believe has been through: the X-Forwarded-For chain it kept
// with the peer appended, X-Forwarded-Host, and a plain http or https
// X-Forwarded-Proto it kept (else the scheme the client used). It is meant
// for a ReverseProxy's Rewrite, which runs after hop-by-hop headers and
// the inbound forwarding headers are gone from pr.Out.
//
// It writes what ProxyRequest.SetXForwarded would, with one allocation
// for the two values of the request's own (a slice each, capped so that
// an append copies) and the proto's value shared.
func SetForwarded(pr *httputil.ProxyRequest) {
	h := pr.Out.Header
	vals := make([]string, 2)
	vals[1] = pr.In.Host
	h["X-Forwarded-Host"] = vals[1:2:2]
	if ip, _, err := net.SplitHostPort(pr.In.RemoteAddr); err == nil {
		if prior := pr.In.Header["X-Forwarded-For"]; len(prior) > 0 {
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		vals[0] = ip
		h["X-Forwarded-For"] = vals[0:1:1]
	} else {
		delete(h, "X-Forwarded-For")
	}
	proto := forwardedHTTP
	switch p := pr.In.Header.Get("X-Forwarded-Proto"); {
	case p == "http":
	case p == "https", pr.In.TLS != nil:
		proto = forwardedHTTPS
	}
	h["X-Forwarded-Proto"] = proto
}

// The values of X-Forwarded-Proto, shared by every request (a header
// map's values are replaced or appended to, never written in place).
var (
	forwardedHTTP  = []string{"http"}
	forwardedHTTPS = []string{"https"}
)
