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

// RoutePath returns the prefix a route's path as written matches: its
// NormalizePath form without a trailing slash ("/orders/" is "/orders"),
// or "/". It refuses what NormalizePath refuses, and any ';', which some
// upstreams read as parameters of a segment.
func RoutePath(written string) (string, error) {
	p, err := NormalizePath(written)
	if err != nil || strings.ContainsRune(p, ';') {
		return "", errBadPath
	}
	if p = strings.TrimSuffix(p, "/"); p == "" {
		p = "/"
	}
	return p, nil
}

// NormalizePath returns the canonical form of an escaped request path:
// escapes of unreserved characters decoded, other escapes upper-cased,
// empty, "." and ".." segments resolved, a trailing slash kept. It refuses
// what an upstream might read as another path: an encoded "/" or "\", a raw
// "\", control characters, bad escapes, dot segments dressed with
// parameters ("..;x"), which servlet containers resolve as "..", a segment
// ending in "." or a space, which IIS and Windows drop ("/orders." is
// "/orders" there), an overlong UTF-8 form ("%C0%AE" for "."), which old
// decoders read as the character, and a "." "/" or "\" encoded twice
// ("%252e"), which a backend that decodes twice reads as the character.
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
		case endsFolded(bare) || endsFolded(s) || encodedTwice(s):
			return errBadPath
		default:
			segments = append(segments, s)
		}
		return nil
	}
	prev := -1 // the byte before, decoded, within the segment
	for i := 1; i < len(escaped); i++ {
		c := escaped[i]
		b := c
		switch {
		case c == '/':
			if err := flush(); err != nil {
				return "", err
			}
			prev = -1
			continue
		case c == '%':
			if i+2 >= len(escaped) {
				return "", errBadPath
			}
			hi, lo := unhex(escaped[i+1]), unhex(escaped[i+2])
			if hi < 0 || lo < 0 {
				return "", errBadPath
			}
			b = byte(hi<<4 | lo)
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
		if overlong(prev, b) {
			return "", errBadPath
		}
		prev = int(b)
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
		case c == '%' || c == '\\' || c == ';' || c == ' ' || c >= 0x80 || c < 0x20 || c == 0x7f:
			return false
		case c == '/':
			if i+1 < len(p) && p[i+1] == '/' {
				return false
			}
		case c == '.':
			if i+1 == len(p) || p[i+1] == '/' || p[i-1] == '/' && p[i+1] == '.' {
				return false
			}
		}
	}
	return true
}

// endsFolded reports whether a segment ends in a character that IIS and
// Windows drop from its end: a dot or a space.
func endsFolded(seg string) bool {
	return strings.HasSuffix(seg, ".") || strings.HasSuffix(seg, " ") || strings.HasSuffix(seg, "%20")
}

// encodedTwice reports whether a normalized segment holds a ".", "/" or
// "\\" escaped twice or more: "%25" (the escape of "%"), any number of
// "25", then the character's hex ("%252e", "%25252e").
func encodedTwice(seg string) bool {
	for i := 0; i+2 < len(seg); i++ {
		if seg[i] != '%' || seg[i+1] != '2' || seg[i+2] != '5' {
			continue
		}
		j := i + 3
		for j+1 < len(seg) && seg[j] == '2' && seg[j+1] == '5' {
			j += 2
		}
		if j+1 >= len(seg) {
			return false
		}
		switch hi, lo := seg[j], seg[j+1]|0x20; {
		case hi == '2' && (lo == 'e' || lo == 'f'), hi == '5' && lo == 'c':
			return true
		}
	}
	return false
}

// overlong reports whether the byte b after the byte prev (-1 for none)
// makes an overlong UTF-8 form, a character spelled in more bytes than it
// takes ("%C0%AE" and "%E0%80%AE" for "."): decoders that accept them read
// the character, so "/%C0%AE%C0%AE/" would be "/../".
func overlong(prev int, b byte) bool {
	if b < 0x80 || b > 0xBF {
		return false
	}
	switch prev {
	case 0xC0, 0xC1:
		return true
	case 0xE0:
		return b < 0xA0
	case 0xF0:
		return b < 0x90
	case 0xF8:
		return b < 0x88
	case 0xFC:
		return b < 0x84
	}
	return false
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

// match returns the route for the request (rawHost is its Host as sent,
// path normalized), or nil and the methods that the path would have
// allowed (for a 405).
func (rt router) match(rawHost, path, method string) (*route, []string) {
	var allow []string
	// The host is made canonical only for a route that names one: most
	// configurations have none, and it costs a split and a fold.
	host, canonical := "", false
	for _, r := range rt.routes {
		if r.Host != "" {
			if !canonical {
				host, canonical = canonicalHost(rawHost), true
			}
			if r.Host != host {
				continue
			}
		}
		if !r.covers(path) {
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

// covers reports whether the route's path covers the normalized path p, as
// the route's backend folds it.
func (r *Route) covers(p string) bool {
	return prefixOnSegments(p, r.Path, r.CaseInsensitive, r.IgnoreExtensions)
}

// prefixOnSegments reports whether prefix covers path on whole segments.
// Matrix parameters (";x") do not make a segment another segment: servlet
// containers drop them, so "/admin;x" is still "/admin" to the route. With
// fold, letters match in any case; an extension of exts right after the
// prefix, at the end of the path, counts as no more than the prefix
// ("/orders.json" is "/orders").
func prefixOnSegments(path, prefix string, fold bool, exts []string) bool {
	if prefix == "/" {
		return true
	}
	if !hasPrefix(path, prefix, fold) {
		if strings.IndexByte(path, ';') < 0 {
			return false
		}
		return prefixOnSegments(stripParams(path), prefix, fold, exts)
	}
	rest := path[len(prefix):]
	return rest == "" || rest[0] == '/' || rest[0] == ';' || ignoredExtension(rest, exts, fold)
}

// ignoredExtension reports whether rest, what follows a route's path, is one
// of exts and then at most a trailing slash or parameters.
func ignoredExtension(rest string, exts []string, fold bool) bool {
	if rest == "" || rest[0] != '.' {
		return false
	}
	for _, ext := range exts {
		if !hasPrefix(rest, ext, fold) {
			continue
		}
		switch after := rest[len(ext):]; {
		case after == "" || after == "/":
			return true
		case after[0] == ';' && strings.IndexByte(after, '/') < 0:
			return true
		}
	}
	return false
}

// hasPrefix is strings.HasPrefix, with ASCII letters in any case when fold
// is set.
func hasPrefix(s, prefix string, fold bool) bool {
	if len(s) < len(prefix) {
		return false
	}
	if !fold {
		return s[:len(prefix)] == prefix
	}
	for i := 0; i < len(prefix); i++ {
		if lowerASCII(s[i]) != lowerASCII(prefix[i]) {
			return false
		}
	}
	return true
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// validExtension reports whether ext can be one of a route's
// IgnoreExtensions: a dot and one or more letters, digits, '-', '_' or '~'.
func validExtension(ext string) bool {
	if len(ext) < 2 || ext[0] != '.' {
		return false
	}
	for i := 1; i < len(ext); i++ {
		if ext[i] == '.' || !isUnreserved(ext[i]) {
			return false
		}
	}
	return true
}

// routesOverlap reports whether two routes would match the same requests:
// the same host, methods that overlap, and the same path, or a path that one
// of them folds into its own ("/Orders" to a case-insensitive "/orders",
// "/orders.json" to an "/orders" that ignores ".json"), so that which one
// a request goes to would depend on the order of the file.
func routesOverlap(a, b *Route) bool {
	if a.Host != b.Host || !MethodsOverlap(a.Methods, b.Methods) {
		return false
	}
	return a.Path == b.Path || a.spells(b.Path) || b.spells(a.Path)
}

// spells reports whether p, another route's path, is the route's own path
// as the route folds it.
func (r *Route) spells(p string) bool {
	if r.Path == "/" || !hasPrefix(p, r.Path, r.CaseInsensitive) {
		return p == r.Path
	}
	rest := p[len(r.Path):]
	return rest == "" || ignoredExtension(rest, r.IgnoreExtensions, r.CaseInsensitive)
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
// trailing dot. A host without a port is not split (SplitHostPort's error
// would cost an allocation a request).
func canonicalHost(h string) string {
	if strings.LastIndexByte(h, ':') > strings.LastIndexByte(h, ']') {
		if host, _, err := net.SplitHostPort(h); err == nil {
			h = host
		}
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
