package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

func writePoolConfig(t *testing.T, path, live, dead, responseTimeout string) {
	t.Helper()
	src := fmt.Sprintf(`
listen {
  http             = "127.0.0.1:0"
  admin            = "127.0.0.1:0"
  shutdown_timeout = "5s"
}
upstream "legacy" {
  targets          = [%q, %q]
  max_fails        = 1
  fail_timeout     = "1h"
  response_timeout = %q
}
route "orders.read" {
  path     = "/orders"
  upstream = "legacy"
}
`, live, dead, responseTimeout)
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestASighupThatKeepsAPoolKeepsItsEjections(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(up.Close)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()

	path := filepath.Join(t.TempDir(), "gateway.hcl")
	writePoolConfig(t, path, up.URL, dead, "30s")
	r := startFile(t, path)
	ejected := fmt.Sprintf(`gateway_upstream_ejected{pool="legacy",target=%q}`, dead)
	failures := fmt.Sprintf(`gateway_upstream_failures_total{cause="refused",pool="legacy",target=%q}`, dead)

	if got := statusesOf(t, r, 4); got != "200 200 200 200" {
		t.Fatalf("with one dead target: %s", got)
	}
	if r.metricValue(t, ejected) != 1 || r.metricValue(t, failures) != 1 {
		t.Fatalf("ejected %v after %v failures, want 1 after 1", r.metricValue(t, ejected), r.metricValue(t, failures))
	}

	writePoolConfig(t, path, up.URL, dead, "20s")
	r.reload(t, "ok")
	if got := statusesOf(t, r, 4); got != "200 200 200 200" {
		t.Fatalf("after the reload: %s", got)
	}
	if r.metricValue(t, ejected) != 1 || r.metricValue(t, failures) != 1 {
		t.Fatalf("after the reload: ejected %v, %v failures; the reload forgot the ejection", r.metricValue(t, ejected), r.metricValue(t, failures))
	}
}
