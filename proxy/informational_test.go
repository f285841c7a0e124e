package proxy_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/proxy"
)

// A 103 from the upstream reaches the client without
// the upstream connection's hop-by-hop headers.
func TestInformationalResponsesLoseTheirHopByHopHeaders(t *testing.T) {
	up := newRawUpstream(t, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\nConnection: x-foo\r\nX-Foo: upstream-only\r\nKeep-Alive: timeout=5\r\n\r\n"+
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", nil)
	r := rawRoute(up)
	r.Policies = onePolicy(policy(limitertest.FixedWindow(10, time.Minute), "p"))
	g := newGateway(t, setup{routes: []proxy.Route{r}})
	_, br, early := dialGateway(t, g, "GET / HTTP/1.1\r\nHost: gw.test\r\n\r\n")
	if early.StatusCode != http.StatusEarlyHints {
		t.Fatalf("status %d, want the 103 first", early.StatusCode)
	}
	if early.Header.Get("Link") == "" {
		t.Errorf("the 103 lost its Link: %v", early.Header)
	}
	for _, name := range []string{"Connection", "X-Foo", "Keep-Alive"} {
		if v, ok := early.Header[name]; ok {
			t.Errorf("the 103 carries %s: %q", name, v)
		}
	}
	final, err := http.ReadResponse(br, nil)
	if err != nil || final.StatusCode != 200 {
		t.Fatalf("final response %v %v", final, err)
	}
	// ReverseProxy clears the header map after a 1xx; the gateway's own
	// headers still reach the final response.
	if final.Header.Get("RateLimit-Policy") == "" || final.Header.Get("RateLimit") == "" {
		t.Errorf("the final response lost the RateLimit headers: %v", final.Header)
	}
}

// A 1xx gets the route's response header rules, as
// the final response does.
func TestInformationalResponsesGetTheRoutesResponseHeaderRules(t *testing.T) {
	up := newRawUpstream(t, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\nServer: legacy/1.0\r\nX-Powered-By: PHP/5.2\r\nSet-Cookie: s=1\r\n\r\n"+
		"HTTP/1.1 200 OK\r\nServer: legacy/1.0\r\nContent-Length: 2\r\n\r\nok", nil)
	r := rawRoute(up)
	r.ResponseHeaders = proxy.HeaderRules{
		Remove: []string{"Server", "X-Powered-By", "Set-Cookie"},
		Set:    []proxy.Header{{Name: "X-Frame-Options", Value: "DENY"}},
	}
	g := newGateway(t, setup{routes: []proxy.Route{r}})
	_, br, early := dialGateway(t, g, "GET / HTTP/1.1\r\nHost: gw.test\r\n\r\n")
	if early.StatusCode != http.StatusEarlyHints {
		t.Fatalf("status %d, want the 103 first", early.StatusCode)
	}
	for _, name := range []string{"Server", "X-Powered-By", "Set-Cookie"} {
		if v, ok := early.Header[name]; ok {
			t.Errorf("the 103 carries %s: %q, which the route removes", name, v)
		}
	}
	if early.Header.Get("X-Frame-Options") != "DENY" || early.Header.Get("Link") == "" {
		t.Errorf("the 103 lacks the route's X-Frame-Options or its Link: %v", early.Header)
	}
	final, err := http.ReadResponse(br, nil)
	if err != nil || final.StatusCode != 200 {
		t.Fatalf("final response %v %v", final, err)
	}
	if _, ok := final.Header["Server"]; ok || final.Header.Get("X-Frame-Options") != "DENY" {
		t.Errorf("the final response did not get the rules: %v", final.Header)
	}
}
