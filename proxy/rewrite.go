package proxy

import (
	"errors"
	"net/netip"
	"strings"
)

// NormalizeRewritePrefix returns the canonical form of a route's
// rewrite_prefix: "" (strip the matched prefix), or a normalized path
// without a trailing slash, so that "/" also strips. A prefix that is not a
// plain path (a query, a fragment, parameters, a character a path cannot
// hold unescaped) is refused.
func NormalizeRewritePrefix(p string) (string, error) {
	if p == "" {
		return "", nil
	}
	if p[0] != '/' {
		return "", errors.New("must start with / (or be \"\", which strips the prefix)")
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if isUnreserved(c) || c == '/' || c == '%' || strings.IndexByte("!$&'()*+,=:@", c) >= 0 {
			continue
		}
		return "", errors.New("must be a path alone: no query, fragment, ;parameters, spaces or other characters a path holds only escaped")
	}
	n, err := NormalizePath(p)
	if err != nil {
		return "", errors.New("must be a path with no encoded slash and no bad escape")
	}
	return strings.TrimSuffix(n, "/"), nil
}

// forwardPath is the path sent upstream for the normalized request path
// the route matched: the path itself, or with the matched prefix replaced
// by the rewrite on whole segments. Parameters of the segment the rewrite
// replaces go with it; the rest of the path is kept as it is, an ignored
// extension after the prefix included ("/orders.json" rewritten from
// "/orders" to "/v2/orders" is "/v2/orders.json").
func (r *route) forwardPath(path string) string {
	if !r.Rewrite {
		return path
	}
	var rest string
	if r.Path == "/" {
		if path != "/" {
			rest = path
		}
	} else {
		if !hasPrefix(path, r.Path, r.CaseInsensitive) {
			// The route matched only once parameters were dropped
			// ("/api;x/v1/orders"): rewrite the path without them.
			path = stripParams(path)
		}
		rest = path[len(r.Path):]
		if rest != "" && rest[0] == ';' {
			if i := strings.IndexByte(rest, '/'); i >= 0 {
				rest = rest[i:]
			} else {
				rest = ""
			}
		}
	}
	switch {
	case rest == "" && r.RewritePrefix == "":
		return "/"
	case rest == "":
		return r.RewritePrefix
	case r.RewritePrefix == "" && rest[0] == '.':
		// An ignored extension after the prefix stripped ("/orders.json"):
		// kept, on a segment of its own.
		return "/" + rest
	case r.RewritePrefix == "":
		return rest
	}
	return r.RewritePrefix + rest
}

// validHostHeader reports whether h can be a route's host_header: a host
// name, an IPv4 address or a bracketed IPv6 address, with an optional port,
// and nothing else.
func validHostHeader(h string) bool {
	host, port := h, ""
	if strings.HasPrefix(h, "[") {
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return false
		}
		a, err := netip.ParseAddr(h[1:end])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return false
		}
		host, port = "", h[end+1:]
		if port != "" {
			if port[0] != ':' {
				return false
			}
			port = port[1:]
			if port == "" {
				return false
			}
		}
	} else if i := strings.LastIndexByte(h, ':'); i >= 0 {
		host, port = h[:i], h[i+1:]
		if port == "" {
			return false
		}
	}
	if len(port) > 5 {
		return false
	}
	for i := 0; i < len(port); i++ {
		if port[i] < '0' || port[i] > '9' {
			return false
		}
	}
	if host == "" {
		return strings.HasPrefix(h, "[")
	}
	if len(host) > 253 {
		return false
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
