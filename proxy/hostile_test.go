package proxy_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/proxy"
)

// Spellings a backend may fold into a limited request must not dodge the
// route that limits it (docs/hardening.md, "Spellings backends fold").
func TestSpellingsThatBackendsFoldCannotDodgeALimit(t *testing.T) {
	up := newUpstream(t)
	orders := route("orders.read", "/orders", up, t, policy(limitertest.FixedWindow(1, time.Minute), "p"))
	orders.Methods = []string{"GET", "HEAD"}
	g := newGateway(t, setup{routes: []proxy.Route{orders, route("default", "/", up, t, nil)}})
	if res := g.raw(t, "GET /orders HTTP/1.1"); res.StatusCode != 200 {
		t.Fatalf("first GET: %d", res.StatusCode)
	}
	for _, c := range []struct {
		name, line string
		status     int
	}{
		{"a method in another case", "get /orders HTTP/1.1", 400},
		{"a mixed-case method on the catch-all", "Post /anything HTTP/1.1", 400},
		{"parameters on the first segment", "GET /;x/orders HTTP/1.1", 429},
		{"parameters on the last segment", "GET /orders;jsessionid=1 HTTP/1.1", 429},
		{"TRACE where no route lists it", "TRACE /orders HTTP/1.1", 405},
		{"CONNECT where no route lists it", "CONNECT /orders HTTP/1.1", 405},
		{"TRACE on the catch-all", "TRACE /anything HTTP/1.1", 405},
	} {
		before := up.count()
		res := g.raw(t, c.line)
		if res.StatusCode != c.status {
			t.Errorf("%s: %d, want %d", c.name, res.StatusCode, c.status)
		}
		if up.count() != before {
			t.Errorf("%s reached the upstream", c.name)
		}
	}
	// A method a route lists in upper case is served as listed.
	trace := route("debug", "/debug", up, t, nil)
	trace.Methods = []string{"TRACE"}
	g2 := newGateway(t, setup{routes: []proxy.Route{trace}})
	if res := g2.raw(t, "TRACE /debug HTTP/1.1"); res.StatusCode != 200 {
		t.Fatalf("TRACE on a route that lists it: %d", res.StatusCode)
	}
}

func TestHeaderNamesWithUnderscoresAreNotForwarded(t *testing.T) {
	up := newUpstream(t)
	g := newGateway(t, setup{routes: []proxy.Route{route("r", "/", up, t, nil)}})
	g.raw(t, "GET / HTTP/1.1", "X_Real_IP", "198.51.100.1", "X-Forwarded_For", "198.51.100.2", "X_API_Key", "known-key-one", "X-Plain", "kept")
	h := up.last().Header
	for _, name := range []string{"X_Real_IP", "X_Real_Ip", "X-Forwarded_For", "X_API_Key", "X_Api_Key"} {
		if v, ok := h[name]; ok {
			t.Errorf("%s reached the upstream: %q", name, v)
		}
	}
	if h.Get("X-Plain") != "kept" {
		t.Errorf("an ordinary header was dropped: %v", h)
	}
}

func TestUnderscoreHeadersPassWhenTheOperatorAllowsThem(t *testing.T) {
	up := newUpstream(t)
	g := newGateway(t, setup{routes: []proxy.Route{route("r", "/", up, t, nil)}, underscores: true})
	g.raw(t, "GET / HTTP/1.1", "X_Custom", "kept")
	if v := up.last().Header.Get("X_Custom"); v != "kept" {
		t.Fatalf("X_Custom %q with allow_underscore_headers", v)
	}
}

// A body the client breaks is the client's fault: 400, and no complete
// request upstream.
func TestAMalformedChunkedBodyIsTheClientsFault(t *testing.T) {
	up := newUpstream(t)
	var complete atomic.Int64
	// Only a request whose whole body arrived counts as served.
	up.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err == nil {
			complete.Add(1)
		}
	})
	g := newGateway(t, setup{routes: []proxy.Route{route("r", "/", up, t, nil)}})
	c, err := net.Dial("tcp", g.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /upload HTTP/1.1\r\nHost: gw.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n")
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 400 || !strings.Contains(string(body), "bad-body") {
		t.Fatalf("%d %s, want 400 bad-body", res.StatusCode, body)
	}
	if complete.Load() != 0 {
		t.Fatal("the upstream got a complete request")
	}
	if strings.Contains(g.logs.String(), "upstream failed") {
		t.Fatalf("logged as an upstream failure:\n%s", g.logs.String())
	}
}

// A flood of denials from one subject writes about a line a second, not a
// line a request; the next line says how many were left out.
func TestAFloodOfDenialsWritesABoundedLog(t *testing.T) {
	up := newUpstream(t)
	g := newGateway(t, setup{routes: []proxy.Route{route("r", "/", up, t, policy(limitertest.FixedWindow(1, time.Minute), "p"))}})
	start := time.Now()
	const n = 300
	got := statuses(t, g, "/", n)
	took := time.Since(start)
	if got[0] != 200 || got[n-1] != 429 {
		t.Fatalf("statuses %v ... %v", got[0], got[n-1])
	}
	lines := strings.Count(g.logs.String(), `"outcome":"denied"`)
	// One line per second the flood touched.
	if most := int(took/time.Second) + 2; lines < 1 || lines > most {
		t.Fatalf("%d denial lines for %d denials in %v, want at most %d", lines, n-1, took, most)
	}
}
