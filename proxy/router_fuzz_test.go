package proxy_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/proxy"
)

// echoTransport stands in for the upstreams: it answers every request
// itself with the host and the escaped path it was sent, so that a fuzz
// iteration costs no connection.
type echoTransport struct{}

func (echoTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	h := http.Header{"X-Upstream-Host": {r.URL.Host}, "X-Upstream-Path": {r.URL.EscapedPath()}}
	return &http.Response{StatusCode: http.StatusOK, Header: h, Body: http.NoBody, Request: r}, nil
}

// FuzzNormalizePath checks that the canonical form is canonical (a fixed
// point that holds nothing an upstream could read as another path), and
// that the route the handler picks and the path it forwards are the ones
// that canonical form names.
func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{
		"/", "/orders", "/orders/", "/orders/7", "/ordersx", "/orders;x", "/;x/orders", "/orders%2F7",
		"//orders", "/./orders", "/x/../orders", "/%6Frders", "/%2e%2e/orders", "/x/..;/orders",
		"/x/.;/a", "/a;jsessionid=1", "/b/%7euser/./c%3f", "/%zz", "/%0a", "/%00a", "/a\\b", "/%5c",
		"/a/b/..", "///a/./", "/..", "/...", "/.a", "/%", "/%4", "/é/%C3%A9", "relative", "",
		// What a backend folds: trailing dots and spaces, overlong and
		// twice-encoded dots, case and extensions of a route that folds.
		"/orders.", "/orders%20", "/orders%2e", "/orders./7", "/orders.;x", "/orders;x.",
		"/%C0%AE%C0%AE/orders", "/%c0%ae", "/%e0%80%ae", "/%F0%80%80%AE", "/%C1%9C", "/%C3%A9%C0",
		"/%252e%252e/orders", "/%252E", "/%25%32%65", "/%2525252e", "/%252f", "/%255C", "/%25",
		"/LEGACY", "/legacy/x", "/%4Cegacy", "/legacy.json", "/LEGACY.JSON/", "/legacy.json;x", "/;x/legacy.json",
		"/legacy.json/x", "/legacy.jsonx", "/legacy.xml", "/legacyx",
	} {
		f.Add(s)
	}

	m := limiter.NewMemory(limiter.MemoryOptions{})
	f.Cleanup(func() { m.Close() })
	const ordersHost, legacyHost, defaultHost = "orders.upstream.test", "legacy.upstream.test", "default.upstream.test"
	h, err := proxy.NewHandler(proxy.Options{Transport: echoTransport{}}, proxy.Config{
		Routes: []proxy.Route{
			{OperationID: "orders", Path: "/orders", Upstream: "http://" + ordersHost},
			{OperationID: "legacy", Path: "/Legacy", Upstream: "http://" + legacyHost, CaseInsensitive: true, IgnoreExtensions: []string{".json"}},
			{OperationID: "default", Path: "/", Upstream: "http://" + defaultHost},
		},
		Resolver: newResolver(f, nil),
		Limiter:  m,
	})
	if err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, escaped string) {
		out, err := proxy.NormalizePath(escaped)
		if err == nil {
			checkCanonical(t, escaped, out)
		}

		// The handler sees the path as the server parsed the request line.
		u, perr := url.ParseRequestURI(escaped)
		if perr != nil || !strings.HasPrefix(escaped, "/") {
			return
		}
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.URL, req.RequestURI = u, escaped
		seen := u.EscapedPath()
		want, err := proxy.NormalizePath(seen)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if err != nil {
			if w.Code != http.StatusBadRequest {
				t.Fatalf("path %q cannot be normalized (%v) but got %d", seen, err, w.Code)
			}
			return
		}
		if w.Code != http.StatusOK {
			t.Fatalf("path %q (canonical %q): status %d, want 200", seen, want, w.Code)
		}
		wantHost := defaultHost
		switch {
		case underOrders(want):
			wantHost = ordersHost
		case underLegacy(want):
			wantHost = legacyHost
		}
		if got := w.Header().Get("X-Upstream-Host"); got != wantHost {
			t.Fatalf("path %q (canonical %q) went to %s, want %s", seen, want, got, wantHost)
		}
		if got := w.Header().Get("X-Upstream-Path"); got != want {
			t.Fatalf("path %q (canonical %q) was forwarded as %q", seen, want, got)
		}
	})
}

// checkCanonical fails t unless out, the canonical form of in, is one.
func checkCanonical(t *testing.T, in, out string) {
	t.Helper()
	if !strings.HasPrefix(out, "/") {
		t.Fatalf("%q: canonical form %q does not start with /", in, out)
	}
	if again, err := proxy.NormalizePath(out); err != nil || again != out {
		t.Fatalf("%q: canonical form %q normalizes again to %q, %v", in, out, again, err)
	}
	if strings.Contains(out, "//") {
		t.Fatalf("%q: canonical form %q holds an empty segment", in, out)
	}
	for seg := range strings.SplitSeq(out[1:], "/") {
		bare, _, _ := strings.Cut(seg, ";")
		if bare == "." || bare == ".." {
			t.Fatalf("%q: canonical form %q holds the dot segment %q", in, out, seg)
		}
		for _, s := range []string{seg, bare} {
			if strings.HasSuffix(s, ".") || strings.HasSuffix(s, " ") || strings.HasSuffix(s, "%20") {
				t.Fatalf("%q: canonical form %q holds the segment %q, which IIS reads without its end", in, out, seg)
			}
		}
		// Decoded again and again, as a backend that decodes twice would:
		// no dot, slash or backslash may appear.
		once, err := url.PathUnescape(seg)
		if err != nil {
			continue
		}
		for i := 0; i+1 < len(once); i++ {
			if overlongAt(once, i) {
				t.Fatalf("%q: canonical form %q holds an overlong UTF-8 form", in, out)
			}
		}
		dots := strings.Count(once, ".")
		for s, k := once, 0; k < 4; k++ {
			next, err := url.PathUnescape(s)
			if err != nil || next == s {
				break
			}
			if strings.ContainsAny(next, "/\\") || strings.Count(next, ".") > dots {
				t.Fatalf("%q: canonical form %q holds %q, which decoded again holds a dot or a separator", in, out, seg)
			}
			s = next
		}
	}
	for i := 0; i < len(out); i++ {
		c := out[i]
		switch {
		case c == '\\' || c < 0x20 || c == 0x7f:
			t.Fatalf("%q: canonical form %q holds the byte %#x", in, out, c)
		case c == '%':
			if i+2 >= len(out) || !isUpperHex(out[i+1]) || !isUpperHex(out[i+2]) {
				t.Fatalf("%q: canonical form %q holds a bad escape at %d", in, out, i)
			}
			b := unhex(out[i+1])<<4 | unhex(out[i+2])
			if b == '/' || b == '\\' || b < 0x20 || b == 0x7f || isUnreserved(b) {
				t.Fatalf("%q: canonical form %q holds the escape %s", in, out, out[i:i+3])
			}
			i += 2
		}
	}
}

// underOrders reports whether the canonical path p is /orders or below it,
// segment by segment, as the router documents it: parameters (";x") do not
// make a segment another one, and a segment of parameters alone is none.
func underOrders(p string) bool {
	first, _ := firstSegment(p)
	return first == "orders"
}

// underLegacy reports whether the canonical path p is the route of
// /Legacy, which folds case and ignores ".json": /legacy in any case or
// below it, or /legacy.json in any case at the end of the path (a trailing
// slash allowed).
func underLegacy(p string) bool {
	first, rest := firstSegment(p)
	first = strings.ToLower(first)
	return first == "legacy" || first == "legacy.json" && (rest == "" || rest == "/")
}

// firstSegment is the first segment of p that is not parameters alone,
// without its parameters, and what follows it.
func firstSegment(p string) (bare, rest string) {
	for p != "" {
		p = p[1:]
		seg := p
		if i := strings.IndexByte(p, '/'); i >= 0 {
			seg, p = p[:i], p[i:]
		} else {
			p = ""
		}
		bare, _, _ = strings.Cut(seg, ";")
		if bare == "" && seg != "" {
			continue
		}
		return bare, p
	}
	return "", ""
}

func isUpperHex(c byte) bool { return '0' <= c && c <= '9' || 'A' <= c && c <= 'F' }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'A' + 10
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// overlongAt reports whether s holds, at i, a lead byte and a continuation
// byte that together spell a character in more bytes than it takes.
func overlongAt(s string, i int) bool {
	lead, next := s[i], s[i+1]
	if next < 0x80 || next > 0xBF {
		return false
	}
	switch lead {
	case 0xC0, 0xC1:
		return true
	case 0xE0:
		return next < 0xA0
	case 0xF0:
		return next < 0x90
	}
	return false
}
