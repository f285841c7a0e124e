package proxy

import (
	"errors"
	"net"
	"slices"
	"strings"
)

// errBadPath: the request path cannot be put in one canonical form, so any
// route chosen for it could differ from what the upstream serves.
var errBadPath = errors.New("path cannot be normalized")

// NormalizePath returns the canonical form of an escaped request path:
// escapes of unreserved characters decoded, other escapes upper-cased,
// empty, "." and ".." segments resolved, a trailing slash kept. It refuses
// what an upstream might read as another path: an encoded "/" or "\", a raw
// "\", control characters, bad escapes, and dot segments dressed with
// parameters ("..;x"), which servlet containers resolve as "..".
func NormalizePath(escaped string) (string, error) {
	if escaped == "" || escaped[0] != '/' {
		return "", errBadPath
	}
	if isClean(escaped) {
		return escaped, nil
	}
	segments := make([]string, 0, 8)
	var seg strings.Builder
	flush := func() error {
		s := seg.String()
		seg.Reset()
		bare, _, _ := strings.Cut(s, ";")
		switch {
		case s == "" || s == ".":
		case s == "..":
			if len(segments) > 0 {
				segments = segments[:len(segments)-1]
			}
		case bare == "." || bare == "..":
			return errBadPath
		default:
			segments = append(segments, s)
		}
		return nil
	}
	for i := 1; i < len(escaped); i++ {
		c := escaped[i]
		switch {
		case c == '/':
			if err := flush(); err != nil {
				return "", err
			}
		case c == '%':
			if i+2 >= len(escaped) {
				return "", errBadPath
			}
			hi, lo := unhex(escaped[i+1]), unhex(escaped[i+2])
			if hi < 0 || lo < 0 {
				return "", errBadPath
			}
			b := byte(hi<<4 | lo)
			switch {
			case isUnreserved(b):
				seg.WriteByte(b)
			case b == '/' || b == '\\' || b < 0x20 || b == 0x7f:
				return "", errBadPath
			default:
				seg.WriteByte('%')
				seg.WriteByte(upperHex[b>>4])
				seg.WriteByte(upperHex[b&15])
			}
			i += 2
		case c == '\\' || c < 0x20 || c == 0x7f:
			return "", errBadPath
		default:
			seg.WriteByte(c)
		}
	}
	last := seg.Len() == 0 && len(escaped) > 1
	if err := flush(); err != nil {
		return "", err
	}
	out := "/" + strings.Join(segments, "/")
	if last && len(segments) > 0 {
		out += "/"
	}
	return out, nil
}

// isClean reports whether p is already canonical, the common case, so that
// it costs no allocation.
func isClean(p string) bool {
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '%' || c == '\\' || c == ';' || c < 0x20 || c == 0x7f:
			return false
		case c == '/':
			if i+1 < len(p) && p[i+1] == '/' {
				return false
			}
		case c == '.':
			if p[i-1] == '/' && (i+1 == len(p) || p[i+1] == '/' || p[i+1] == '.') {
				return false
			}
		}
	}
	return true
}

const upperHex = "0123456789ABCDEF"

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// router picks a route for a host and a normalized path: the longest path
// prefix on whole segments wins, a route with a host beats one without, and
// ties fall to file order.
type router struct {
	routes []*route // in precedence order
	// methods are the standard methods and every method a route lists, in
	// upper case: a request that spells one of them in another case is
	// refused, since a backend that folds case would serve it as the
	// method a route limits.
	methods map[string]bool
}

// standardMethods are RFC 9110's and PATCH.
var standardMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}

// explicitOnly are the methods a route without a methods list does not
// take: TRACE reflects the request (credentials included) and CONNECT asks
// for a tunnel; a route must list them to serve them.
func explicitOnly(m string) bool { return m == "TRACE" || m == "CONNECT" }

// methodCaseFolded reports whether m is not upper case but is, upper-cased,
// a method the gateway knows.
func (rt router) methodCaseFolded(m string) bool {
	for i := 0; i < len(m); i++ {
		if 'a' <= m[i] && m[i] <= 'z' {
			return rt.methods[strings.ToUpper(m)]
		}
	}
	return false
}

// methodName is the method as the access log names it: a standard
// method, or one a route lists, by name; any other as "_OTHER" (as
// OpenTelemetry's HTTP conventions do), so that a client cannot write what
// it likes into the log.
func (rt router) methodName(m string) string {
	if rt.methods[m] {
		return m
	}
	return "_OTHER"
}

func newRouter(routes []*route) router {
	methods := map[string]bool{}
	for _, m := range standardMethods {
		methods[m] = true
	}
	for _, r := range routes {
		for _, m := range r.Methods {
			methods[strings.ToUpper(m)] = true
		}
	}
	sorted := slices.Clone(routes)
	slices.SortStableFunc(sorted, func(a, b *route) int {
		if d := len(b.Path) - len(a.Path); d != 0 {
			return d
		}
		if (a.Host == "") != (b.Host == "") {
			if a.Host != "" {
				return -1
			}
			return 1
		}
		return 0
	})
	return router{routes: sorted, methods: methods}
}

// match returns the route for the request, or nil and the methods that the
// path would have allowed (for a 405).
func (rt router) match(host, path, method string) (*route, []string) {
	var allow []string
	for _, r := range rt.routes {
		if r.Host != "" && r.Host != host {
			continue
		}
		if !prefixOnSegments(path, r.Path) {
			continue
		}
		if r.allowsMethod(method) {
			return r, nil
		}
		if len(r.Methods) == 0 {
			allow = append(allow, anyMethod...)
		} else {
			allow = append(allow, r.Methods...)
		}
	}
	slices.Sort(allow)
	return nil, slices.Compact(allow)
}

// anyMethod is what a route without a methods list allows, for Allow.
var anyMethod = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// prefixOnSegments reports whether prefix covers path on whole segments.
// Matrix parameters (";x") do not make a segment another segment: servlet
// containers drop them, so "/admin;x" is still "/admin" to the route.
func prefixOnSegments(path, prefix string) bool {
	if prefix == "/" {
		return true
	}
	if !strings.HasPrefix(path, prefix) {
		if strings.IndexByte(path, ';') < 0 {
			return false
		}
		return prefixOnSegments(stripParams(path), prefix)
	}
	rest := path[len(prefix):]
	return rest == "" || rest[0] == '/' || rest[0] == ';'
}

func stripParams(path string) string {
	var b strings.Builder
	for seg := range strings.SplitSeq(path, "/") {
		bare, _, _ := strings.Cut(seg, ";")
		if bare == "" && seg != "" {
			// ";x" alone is no segment to a servlet container: "/;x/orders"
			// is "/orders".
			continue
		}
		if b.Len() > 0 || seg != "" {
			b.WriteByte('/')
		}
		b.WriteString(bare)
	}
	return b.String()
}

// canonicalHost lower-cases a Host header and drops its port and any
// trailing dot.
func canonicalHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.TrimSuffix(h, ".")
	return strings.ToLower(h)
}

func (r *route) allowsMethod(m string) bool {
	if len(r.Methods) == 0 {
		return !explicitOnly(m)
	}
	for _, x := range r.Methods {
		if x == m {
			return true
		}
	}
	return false
}

// MethodsOverlap reports whether two method sets share a method; an empty
// set is every method. Two routes on one host and path whose methods
// overlap would match the same requests.
func MethodsOverlap(a, b []string) bool {
	if len(a) == 0 || len(b) == 0 {
		return true
	}
	for _, m := range a {
		if slices.Contains(b, m) {
			return true
		}
	}
	return false
}
