package proxy_test

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
	"github.com/edgegate/gateway/subject/jwttest"
)

// accessLines are the access log records of g written since offset bytes.
func accessLines(t *testing.T, g *gateway, offset int) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(g.logs.String()[offset:]), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not JSON: %.200q", line)
		}
		if rec["msg"] == "request" {
			out = append(out, rec)
		}
	}
	return out
}

// stopClock gives g's access log throttle a clock of its own, which moves
// only when the test says.
func stopClock(g *gateway) *limitertest.Clock {
	c := limitertest.NewClock()
	proxy.SetLogClock(g.handler, c.Now)
	return c
}

func TestALongMethodAddsAFewHundredBytesToTheAccessLog(t *testing.T) {
	up := newUpstream(t)
	orders := route("orders.read", "/orders", up, t, policy(limitertest.FixedWindow(100, time.Minute), "p"))
	orders.Methods = []string{"GET", "HEAD"}
	g := newGateway(t, setup{routes: []proxy.Route{orders}})
	stopClock(g)
	method := strings.Repeat("X", 60000)
	before := len(g.logs.String())
	for range 20 {
		if res := g.raw(t, method+" /orders HTTP/1.1"); res.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("status %d, want 405", res.StatusCode)
		}
	}
	if grown := len(g.logs.String()) - before; grown > 500 {
		t.Fatalf("20 requests with a 60,000-byte method added %d bytes to the log", grown)
	}
	lines := accessLines(t, g, before)
	if len(lines) != 1 || lines[0]["method"] != "_OTHER" || lines[0]["outcome"] != "rejected" {
		t.Fatalf("lines %v, want one, rejected, method _OTHER", lines)
	}
}

func TestNoAccessLogFieldIsLongerThan256Bytes(t *testing.T) {
	up := newUpstream(t)
	long := strings.Repeat("r", 300)
	open := route(long, "/", up, t, nil)
	open.Methods = []string{"GET", strings.Repeat("M", 300)}
	g := newGateway(t, setup{routes: []proxy.Route{open}})
	before := len(g.logs.String())
	g.raw(t, strings.Repeat("M", 300)+" /x HTTP/1.1")
	g.raw(t, "GET /x HTTP/1.1")
	g.raw(t, "PURGE /x HTTP/1.1")
	lines := accessLines(t, g, before)
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3", len(lines))
	}
	for _, rec := range lines {
		for k, v := range rec {
			if s, ok := v.(string); ok && len(s) > 256 {
				t.Errorf("field %s holds %d bytes", k, len(s))
			}
		}
	}
	if lines[1]["method"] != "GET" || lines[2]["method"] != "_OTHER" {
		t.Errorf("methods %v, %v; want GET, _OTHER", lines[1]["method"], lines[2]["method"])
	}
}

func TestRequestsThatForwardNothingAreLoggedOnceASecondWithTheCount(t *testing.T) {
	up := newUpstream(t)
	k := jwttest.RSA(t, "r1")
	keys, err := subject.ParseKeySet(jwttest.JWKS(k))
	if err != nil {
		t.Fatal(err)
	}
	orders := jwtRoute(t, up, policy(limitertest.FixedWindow(1, time.Hour), "one"))
	orders.Path, orders.Methods = "/orders", []string{"GET"}
	g := newGateway(t, setup{routes: []proxy.Route{orders}, resolver: jwtGatewayResolver(t, keys)})
	clock := stopClock(g)
	valid := "Bearer " + k.Sign(t, jwttest.Claims("alice", time.Now().Add(time.Hour)))
	if res := g.raw(t, "GET /orders HTTP/1.1", "Authorization", valid); res.StatusCode != 200 {
		t.Fatalf("first request: %d", res.StatusCode)
	}
	for _, c := range []struct {
		name, line, outcome string
		headers             []string
		status              int
	}{
		{"no route", "GET /nowhere HTTP/1.1", "no_route", nil, 404},
		{"a method the route refuses", "DELETE /orders HTTP/1.1", "rejected", nil, 405},
		{"a method in the wrong case", "get /orders HTTP/1.1", "rejected", nil, 400},
		{"a path that cannot be normalized", "GET /%2e%2e;x/orders HTTP/1.1", "rejected", nil, 400},
		{"an invalid token", "GET /orders HTTP/1.1", "invalid_token", []string{"Authorization", "Bearer not.a.token"}, 401},
		{"a denial", "GET /orders HTTP/1.1", "denied", []string{"Authorization", valid}, 429},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Refusals of one route, client and outcome share their
			// lines: each case starts a second of its own.
			clock.Advance(time.Second)
			before := len(g.logs.String())
			for range 5 {
				if res := g.raw(t, c.line, c.headers...); res.StatusCode != c.status {
					t.Fatalf("status %d, want %d", res.StatusCode, c.status)
				}
			}
			lines := accessLines(t, g, before)
			if len(lines) != 1 || lines[0]["outcome"] != c.outcome || lines[0]["not_logged"] != nil {
				t.Fatalf("5 requests in one second logged %v, want one %s line", lines, c.outcome)
			}
			clock.Advance(time.Second)
			before = len(g.logs.String())
			g.raw(t, c.line, c.headers...)
			lines = accessLines(t, g, before)
			if len(lines) != 1 || lines[0]["not_logged"] != float64(4) {
				t.Fatalf("the next second logged %v, want one line with not_logged 4", lines)
			}
		})
	}
	t.Run("another client gets its own line", func(t *testing.T) {
		clock.Advance(time.Second)
		before := len(g.logs.String())
		for _, local := range []string{"127.0.0.1", "127.0.0.1", "127.0.0.2"} {
			fromPath(t, g, local, "/nowhere")
		}
		if lines := accessLines(t, g, before); len(lines) != 2 {
			t.Fatalf("3 requests from 2 clients logged %d lines, want 2", len(lines))
		}
	})
	t.Run("requests forwarded are each logged", func(t *testing.T) {
		open := route("open", "/", up, t, nil)
		m := limiter.NewMemory(limiter.MemoryOptions{})
		t.Cleanup(func() { m.Close() })
		if err := g.handler.Swap(proxy.Config{Routes: []proxy.Route{open}, Resolver: newResolver(t, nil), Limiter: m}); err != nil {
			t.Fatal(err)
		}
		before := len(g.logs.String())
		for range 3 {
			g.raw(t, "GET /x HTTP/1.1")
		}
		if lines := accessLines(t, g, before); len(lines) != 3 {
			t.Fatalf("3 forwarded requests logged %d lines", len(lines))
		}
	})
}

// fromPath sends a GET for path from the loopback address local.
func fromPath(t *testing.T, g *gateway, local, path string, headers ...string) *http.Response {
	t.Helper()
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}).DialContext}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest("GET", g.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	res, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res
}
