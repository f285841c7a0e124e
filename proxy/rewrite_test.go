package proxy_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
)

// legacyBackend records every request as it arrived and answers like an
// old application server: it names itself in Server and X-Powered-By.
type legacyBackend struct {
	*httptest.Server
	mu       sync.Mutex
	requests []*http.Request
}

func newLegacyBackend(t *testing.T) *legacyBackend {
	b := &legacyBackend{}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.requests = append(b.requests, r.Clone(context.Background()))
		b.mu.Unlock()
		w.Header().Set("Server", "Apache/1.3.42 (Unix)")
		w.Header().Set("X-Powered-By", "PHP/4.4.9")
		w.Header().Set("Cache-Control", "public, max-age=600")
		w.Write([]byte("ok"))
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *legacyBackend) last(t *testing.T) *http.Request {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.requests) == 0 {
		t.Fatal("nothing reached the backend")
	}
	return b.requests[len(b.requests)-1]
}

func legacyRoute(t *testing.T, b *legacyBackend, rewrite *string) proxy.Route {
	r := proxy.Route{
		OperationID: "orders.read", Path: "/api/v1/orders", Upstream: b.URL,
		Policies: onePolicy(policy(limitertest.FixedWindow(100, time.Minute), "p")),
		Subject:  []subject.Kind{subject.ClientIP}, Cost: 1,
	}
	if rewrite != nil {
		r.Rewrite, r.RewritePrefix = true, *rewrite
	}
	return r
}

func ptr[T any](v T) *T { return &v }

func TestRewritePrefixReplacesTheMatchedSegments(t *testing.T) {
	for _, c := range []struct {
		name, rewrite, target, want string
	}{
		{"a prefix is replaced and the query kept", "/cgi-bin/orders", "/api/v1/orders/7?x=1", "/cgi-bin/orders/7?x=1"},
		{"an empty rewrite strips the prefix", "", "/api/v1/orders/7?x=1", "/7?x=1"},
		{"the prefix alone becomes the rewrite", "/cgi-bin/orders", "/api/v1/orders", "/cgi-bin/orders"},
		{"the prefix alone, stripped, becomes the root", "", "/api/v1/orders?x=1", "/?x=1"},
		{"a trailing slash is kept", "/cgi-bin/orders", "/api/v1/orders/", "/cgi-bin/orders/"},
		{"a spelling that normalizes to the prefix is rewritten the same", "/cgi-bin/orders", "//api/v1/./orders/7?x=1", "/cgi-bin/orders/7?x=1"},
		{"dot-dot and escapes are resolved before the rewrite", "/cgi-bin/orders", "/api/v2/../v1/%6Frders/7", "/cgi-bin/orders/7"},
		{"parameters of a replaced segment go with it", "", "/api/v1/orders;jsessionid=1/7", "/7"},
		{"parameters inside the prefix do not stop the rewrite", "/cgi-bin/orders", "/api;x/v1/orders/7", "/cgi-bin/orders/7"},
		{"escapes past the prefix reach the backend as sent", "/cgi-bin/orders", "/api/v1/orders/a%20b", "/cgi-bin/orders/a%20b"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newLegacyBackend(t)
			g := newGateway(t, setup{routes: []proxy.Route{legacyRoute(t, b, ptr(c.rewrite))}})
			res := g.raw(t, "GET "+c.target+" HTTP/1.1")
			if res.StatusCode != 200 {
				t.Fatalf("status %d", res.StatusCode)
			}
			if got := b.last(t).RequestURI; got != c.want {
				t.Fatalf("the backend got %q, want %q", got, c.want)
			}
		})
	}
}

func TestAPathOutsideTheRewrittenPrefixIsNotRewritten(t *testing.T) {
	b := newLegacyBackend(t)
	g := newGateway(t, setup{routes: []proxy.Route{legacyRoute(t, b, ptr("/cgi-bin/orders"))}})
	if res := g.raw(t, "GET /api/v1/ordersx/7 HTTP/1.1"); res.StatusCode != 404 {
		t.Fatalf("status %d, want 404 (ordersx is another segment)", res.StatusCode)
	}
}

func TestARouteWithoutRewriteForwardsTheMatchedPath(t *testing.T) {
	b := newLegacyBackend(t)
	g := newGateway(t, setup{routes: []proxy.Route{legacyRoute(t, b, nil)}})
	g.raw(t, "GET //api/v1/./orders/7?x=1 HTTP/1.1")
	if got := b.last(t).RequestURI; got != "/api/v1/orders/7?x=1" {
		t.Fatalf("the backend got %q", got)
	}
}

func TestHostHeaderAndHeaderRulesReachTheBackend(t *testing.T) {
	b := newLegacyBackend(t)
	r := legacyRoute(t, b, ptr("/cgi-bin/orders"))
	r.HostHeader = "orders.internal"
	r.RequestHeaders = proxy.HeaderRules{
		Set:    []proxy.Header{{Name: "X-Gateway", Value: "edge"}, {Name: "x-legacy-tenant", Value: "eu-1"}},
		Remove: []string{"X-Debug", "cookie"},
	}
	r.ResponseHeaders = proxy.HeaderRules{
		Set:    []proxy.Header{{Name: "Cache-Control", Value: "no-store"}},
		Remove: []string{"Server", "x-powered-by"},
	}
	g := newGateway(t, setup{routes: []proxy.Route{r}})
	res := g.get(t, "/api/v1/orders/7?x=1",
		"X-Debug", "1", "Cookie", "a=b", "X-Gateway", "forged", "X-Legacy-Tenant", "other", "X-Kept", "yes")
	if res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
	got := b.last(t)
	if got.Host != "orders.internal" {
		t.Errorf("Host %q, want orders.internal", got.Host)
	}
	if got.RequestURI != "/cgi-bin/orders/7?x=1" {
		t.Errorf("request target %q", got.RequestURI)
	}
	for name, want := range map[string][]string{
		"X-Gateway":       {"edge"},
		"X-Legacy-Tenant": {"eu-1"},
		"X-Debug":         nil,
		"Cookie":          nil,
		"X-Kept":          {"yes"},
		// The gateway's own headers are still there, and the client's
		// original Host is what X-Forwarded-Host says.
		"X-Forwarded-For": {"127.0.0.1"},
	} {
		if v := got.Header.Values(name); len(v) != len(want) || len(v) > 0 && v[0] != want[0] {
			t.Errorf("%s: the backend got %q, want %q", name, v, want)
		}
	}
	if fh := got.Header.Get("X-Forwarded-Host"); fh != g.Listener.Addr().String() {
		t.Errorf("X-Forwarded-Host %q, want the client's Host %q", fh, g.Listener.Addr())
	}
	for name, want := range map[string]string{
		"Cache-Control": "no-store",
		"Server":        "",
		"X-Powered-By":  "",
	} {
		if v := res.Header.Values(name); want == "" && len(v) > 0 || want != "" && (len(v) != 1 || v[0] != want) {
			t.Errorf("response %s: %q, want %q", name, v, want)
		}
	}
	if res.Header.Get("RateLimit") == "" || res.Header.Get("RateLimit-Policy") == "" {
		t.Errorf("the RateLimit headers are gone: %v", res.Header)
	}
}

func TestWithoutHostHeaderTheTargetsHostIsSent(t *testing.T) {
	b := newLegacyBackend(t)
	g := newGateway(t, setup{routes: []proxy.Route{legacyRoute(t, b, nil)}})
	g.get(t, "/api/v1/orders")
	if got, want := b.last(t).Host, b.Listener.Addr().String(); got != want {
		t.Fatalf("Host %q, want the target's %q", got, want)
	}
}

func TestHeaderRulesTheGatewayManagesAreRefused(t *testing.T) {
	b := newLegacyBackend(t)
	m := limiter.NewMemory(limiter.MemoryOptions{})
	t.Cleanup(func() { m.Close() })
	for _, c := range []struct {
		name  string
		rules proxy.HeaderRules
	}{
		{"setting X-Forwarded-For", proxy.HeaderRules{Set: []proxy.Header{{Name: "X-Forwarded-For", Value: "10.0.0.1"}}}},
		{"removing Forwarded", proxy.HeaderRules{Remove: []string{"forwarded"}}},
		{"setting the principal header", proxy.HeaderRules{Set: []proxy.Header{{Name: "X-Auth-Principal", Value: "admin"}}}},
		{"removing the API key header", proxy.HeaderRules{Remove: []string{"X-API-Key"}}},
		// A CGI backend reads X_Real_IP as X-Real-IP: the rule's header
		// is sent, unlike a client's.
		{"setting X_Real_IP", proxy.HeaderRules{Set: []proxy.Header{{Name: "X_Real_IP", Value: "10.0.0.1"}}}},
		{"setting X_Forwarded_For", proxy.HeaderRules{Set: []proxy.Header{{Name: "x_forwarded_for", Value: "10.0.0.1"}}}},
		{"removing X_API_Key", proxy.HeaderRules{Remove: []string{"X_API_Key"}}},
		{"setting Content-Length", proxy.HeaderRules{Set: []proxy.Header{{Name: "Content-Length", Value: "0"}}}},
		{"a value with CR LF", proxy.HeaderRules{Set: []proxy.Header{{Name: "X-A", Value: "a\r\nX-B: b"}}}},
		{"a name twice", proxy.HeaderRules{Set: []proxy.Header{{Name: "X-A", Value: "a"}}, Remove: []string{"x-a"}}},
	} {
		t.Run(c.name+" is refused", func(t *testing.T) {
			r := legacyRoute(t, b, nil)
			r.RequestHeaders = c.rules
			if _, err := proxy.NewHandler(proxy.Options{}, proxy.Config{Routes: []proxy.Route{r}, Resolver: newResolver(t, nil), Limiter: m}); err == nil {
				t.Fatal("NewHandler took it")
			}
			r = legacyRoute(t, b, nil)
			r.ResponseHeaders = c.rules
			if _, err := proxy.NewHandler(proxy.Options{}, proxy.Config{Routes: []proxy.Route{r}, Resolver: newResolver(t, nil), Limiter: m}); err == nil {
				t.Fatal("NewHandler took it on the response")
			}
		})
	}
}

// A response the upstream sent without a Content-Type
// reaches the client without one, not with one the server sniffed from
// the body; and a rule that removes Content-Type removes it.
func TestNoContentTypeIsSniffed(t *testing.T) {
	for _, c := range []struct {
		name, reply string
		rules       proxy.HeaderRules
	}{
		{"when the upstream sends none", "HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world", proxy.HeaderRules{}},
		{"when a rule removes the upstream's", "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 11\r\n\r\nhello world", proxy.HeaderRules{Remove: []string{"Content-Type"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := newRawUpstream(t, c.reply, nil)
			r := rawRoute(up)
			r.ResponseHeaders = c.rules
			g := newGateway(t, setup{routes: []proxy.Route{r}})
			_, br, res := dialGateway(t, g, "GET / HTTP/1.1\r\nHost: gw.test\r\n\r\n")
			if res.StatusCode != 200 {
				t.Fatalf("status %d", res.StatusCode)
			}
			if v, ok := res.Header["Content-Type"]; ok {
				t.Errorf("Content-Type: %q reached the client", v)
			}
			body := make([]byte, 11)
			if _, err := io.ReadFull(br, body); err != nil || string(body) != "hello world" {
				t.Errorf("body %q %v", body, err)
			}
		})
	}
}
