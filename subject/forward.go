package subject

import (
	"net/http"
	"net/http/httputil"
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

// SetForwarded decides what the upstream may believe about who is asking,
// by the same trust Resolve uses, and writes it on pr.Out. From a trusted
// proxy it keeps the X-Forwarded-For chain and a plain http or https
// X-Forwarded-Proto, and appends the peer; from anyone else it drops the
// principal and plan headers, the configured forwarded header and every
// client-address header, so that no client can assert an identity the
// limiter did not believe. It is meant for a ReverseProxy's Rewrite, which
// runs after hop-by-hop headers are gone.
func (r *Resolver) SetForwarded(pr *httputil.ProxyRequest) {
	trusted := r.trusts(peerAddr(pr.In))
	if trusted {
		if v := pr.In.Header["X-Forwarded-For"]; len(v) > 0 {
			pr.Out.Header["X-Forwarded-For"] = v
		}
	} else {
		for _, h := range clientAddressHeaders {
			delete(pr.Out.Header, h)
		}
		if r.principalHeader != "" {
			delete(pr.Out.Header, r.principalHeader)
		}
		if r.planHeader != "" {
			delete(pr.Out.Header, r.planHeader)
		}
		delete(pr.Out.Header, r.forwardedHeader)
	}
	pr.SetXForwarded()
	if trusted {
		if p := pr.In.Header.Get("X-Forwarded-Proto"); p == "http" || p == "https" {
			pr.Out.Header.Set("X-Forwarded-Proto", p)
		}
	}
}
