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
	} {
		f.Add(s)
	}

	m := limiter.NewMemory(limiter.MemoryOptions{})
	f.Cleanup(func() { m.Close() })
	ordersUpstream := &url.URL{Scheme: "http", Host: "orders.upstream.test"}
	defaultUpstream := &url.URL{Scheme: "http", Host: "default.upstream.test"}
	h, err := proxy.NewHandler(proxy.Options{Transport: echoTransport{}}, proxy.Config{
		Routes: []proxy.Route{
			{OperationID: "orders", Path: "/orders", Upstream: ordersUpstream},
			{OperationID: "default", Path: "/", Upstream: defaultUpstream},
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
		wantHost := defaultUpstream.Host
		if underOrders(want) {
			wantHost = ordersUpstream.Host
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
	for seg := range strings.SplitSeq(p[1:], "/") {
		bare, _, _ := strings.Cut(seg, ";")
		if bare == "" && seg != "" {
			continue
		}
		return bare == "orders"
	}
	return false
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
