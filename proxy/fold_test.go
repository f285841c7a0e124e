package proxy_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/gateway/internal/option"
	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/proxy"
)

// legacyRoutes are the shipped gateway.hcl's shape: /orders limited per
// client, everything else through an open route of /.
func legacyRoutes(t *testing.T, up *upstream, fold bool) []proxy.Route {
	read := route("orders.read", "/orders", up, t, policy(limitertest.FixedWindow(1, time.Minute), "per-client"))
	read.Methods = []string{"GET", "HEAD"}
	if fold {
		read.CaseInsensitive, read.IgnoreExtensions = true, []string{".json", ".xml"}
	}
	return []proxy.Route{read, route("default", "/", up, t, nil)}
}

func TestSpellingsThatLegacyBackendsFoldCannotDodgeTheirRoute(t *testing.T) {
	up := newUpstream(t)
	g := newGateway(t, setup{routes: legacyRoutes(t, up, true)})
	if res := g.raw(t, "GET /orders HTTP/1.1"); res.StatusCode != 200 {
		t.Fatalf("first: %d", res.StatusCode)
	}
	t.Run("folded spellings are the route and share its limit", func(t *testing.T) {
		for _, spelling := range []string{
			"/ORDERS", "/Orders", "/%4Frders", "/%4frders", "/oRdErS/7", "/orders.json", "/orders.xml",
			"/ORDERS.JSON", "/Orders.Xml", "/orders.json/", "/orders.json;x", "/;x/orders.json", "/x/../ORDERS",
		} {
			res := g.raw(t, "GET "+spelling+" HTTP/1.1")
			if res.StatusCode != 429 || !strings.Contains(res.Header.Get("RateLimit-Policy"), `"per-client"`) {
				t.Errorf("%s: %d %q, want 429 from orders.read", spelling, res.StatusCode, res.Header.Get("RateLimit-Policy"))
			}
		}
	})
	t.Run("trailing dots and spaces, overlong and twice-encoded dots are refused", func(t *testing.T) {
		for _, spelling := range []string{
			"/orders.", "/orders%20", "/orders%2e", "/orders%2E", "/orders..", "/orders.%20", "/orders./7", "/orders%20/7",
			"/orders;x.", "/orders.;x", "/orders.json.",
			"/%C0%AE%C0%AE/orders", "/%c0%ae%c0%ae/orders", "/%e0%80%ae%e0%80%ae/orders", "/%F0%80%80%AE/orders",
			"/%C0%AF", "/%C1%9C", "/x/%c0%ae%c0%ae/orders",
			"/%252e%252e/orders", "/%252E%252E/orders", "/x/%25%32%65%25%32%65/orders", "/%25%32%45", "/orders%252f", "/orders%255c",
			"/%2525252e",
		} {
			res := g.raw(t, "GET "+spelling+" HTTP/1.1")
			if res.StatusCode != 400 || !strings.Contains(body(res), "urn:edge-gateway:problem:bad-path") {
				t.Errorf("%s: %d, want 400 bad-path", spelling, res.StatusCode)
			}
		}
	})
	t.Run("what is another path stays another path", func(t *testing.T) {
		for _, spelling := range []string{"/orders.csv", "/orders.jsonx", "/ordersjson", "/orders.json/7", "/ordersx", "/a.b/c", "/caf%C3%A9", "/%C3%80"} {
			if res := g.raw(t, "GET "+spelling+" HTTP/1.1"); res.StatusCode != 200 {
				t.Errorf("%s: %d, want 200 through /", spelling, res.StatusCode)
			}
		}
	})
	t.Run("the path goes upstream as the client spelled it", func(t *testing.T) {
		g := newGateway(t, setup{routes: legacyRoutes(t, up, true)})
		for spelling, want := range map[string]string{"/ORDERS/7": "/ORDERS/7", "/%4Frders.json": "/Orders.json"} {
			res := g.raw(t, "GET "+spelling+" HTTP/1.1")
			if got := res.Header.Get("X-Upstream-Path"); res.StatusCode != 200 || got != want {
				t.Errorf("%s: %d, upstream saw %q, want %q", spelling, res.StatusCode, got, want)
			}
			g.clock.Advance(time.Minute)
		}
	})
	t.Run("a rewrite keeps the extension after the new prefix", func(t *testing.T) {
		routes := legacyRoutes(t, up, true)
		routes[0].Rewrite, routes[0].RewritePrefix = true, "/v2/orders"
		g := newGateway(t, setup{routes: routes})
		res := g.raw(t, "GET /ORDERS.json HTTP/1.1")
		if got := res.Header.Get("X-Upstream-Path"); got != "/v2/orders.json" {
			t.Fatalf("upstream saw %q, want /v2/orders.json", got)
		}
	})
	t.Run("without the options the route matches exactly", func(t *testing.T) {
		g := newGateway(t, setup{routes: legacyRoutes(t, up, false)})
		g.raw(t, "GET /orders HTTP/1.1")
		for _, spelling := range []string{"/ORDERS", "/orders.json"} {
			if res := g.raw(t, "GET "+spelling+" HTTP/1.1"); res.StatusCode != 200 || res.Header.Get("RateLimit-Policy") != "" {
				t.Errorf("%s: %d %q, want 200 through the open route", spelling, res.StatusCode, res.Header.Get("RateLimit-Policy"))
			}
		}
	})
}

func TestRoutesThatCollideOnceFoldedAreRefused(t *testing.T) {
	up := newUpstream(t)
	for name, routes := range map[string][2]proxy.Route{
		"a case-insensitive path and another case of it": {
			{OperationID: "a", Path: "/orders", CaseInsensitive: true},
			{OperationID: "b", Path: "/Orders"},
		},
		"an ignored extension and the path with it": {
			{OperationID: "a", Path: "/orders.json"},
			{OperationID: "b", Path: "/orders", IgnoreExtensions: []string{".json"}},
		},
		"an extension in another case, case-insensitive": {
			{OperationID: "a", Path: "/orders", CaseInsensitive: true, IgnoreExtensions: []string{".json"}},
			{OperationID: "b", Path: "/ORDERS.JSON"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			var rs []proxy.Route
			for _, r := range routes {
				r.Upstream = up.URL
				rs = append(rs, r)
			}
			m := limiter.NewMemory(limiter.MemoryOptions{})
			t.Cleanup(func() { m.Close() })
			_, err := proxy.NewHandler(proxy.Options{}, proxy.Config{Routes: rs, Resolver: newResolver(t, nil), Limiter: m})
			var fe *option.Error
			if !errors.As(err, &fe) || fe.Summary != "Routes overlap once folded" {
				t.Fatalf("NewHandler: %v, want the routes refused", err)
			}
		})
	}
}

func body(res *http.Response) string {
	b, _ := io.ReadAll(res.Body)
	return string(b)
}
