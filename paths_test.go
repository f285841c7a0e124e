package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTheShippedGatewayKeepsFoldedSpellingsOnTheirRoute runs gateway.hcl as
// shipped, in front of an upstream that answers everything: once
// orders.read has said 429, no spelling of /orders that a legacy backend
// folds into it reaches the upstream through the route of /.
func TestTheShippedGatewayKeepsFoldedSpellingsOnTheirRoute(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	src, err := os.ReadFile("gateway.hcl")
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.NewReplacer(
		`":8080"`, `"127.0.0.1:0"`,
		`"127.0.0.1:9901"`, `"127.0.0.1:0"`,
		`"http://127.0.0.1:9000"`, fmt.Sprintf("%q", up.URL),
	).Replace(string(src))
	path := filepath.Join(t.TempDir(), "gateway.hcl")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	r := startFile(t, path)
	status := func(target string) int {
		t.Helper()
		dial := func() (net.Conn, error) { return net.Dial("tcp", r.servers.HTTPAddr().String()) }
		got, _ := sendRaw(t, dial, []byte("GET "+target+" HTTP/1.1\r\nHost: gw.test\r\nConnection: close\r\n\r\n"))
		if len(got) != 1 {
			t.Fatalf("%s: statuses %v", target, got)
		}
		return got[0]
	}
	for range 5 { // orders.read's per-client limit
		if s := status("/orders"); s != 200 {
			t.Fatalf("/orders: %d within the limit", s)
		}
	}
	for _, spelling := range []string{"/orders", "/ORDERS", "/Orders", "/%4Frders", "/orders.json", "/orders.xml", "/ORDERS.JSON"} {
		if s := status(spelling); s != 429 {
			t.Errorf("%s: %d, want 429 from orders.read", spelling, s)
		}
	}
	for _, spelling := range []string{"/orders.", "/orders%20", "/%C0%AErders/../orders", "/orders/%c0%ae%c0%ae/", "/orders/%e0%80%ae%e0%80%ae", "/orders/%252e%252e/x", "/orders/%25%32%65%25%32%65/x"} {
		if s := status(spelling); s != 400 {
			t.Errorf("%s: %d, want 400", spelling, s)
		}
	}
	if s := status("/other"); s != 200 {
		t.Fatalf("/other: %d through the default route", s)
	}
}
