package main

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ja4Gateway is an HTTPS gateway behind a trusted proxy (127.0.0.1, so
// X-Forwarded-For is believed) with a route per fingerprint source, each
// admitting 5 requests an hour, and one by address alone.
func ja4Gateway(t *testing.T) *mtlsRunning {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	dir := t.TempDir()
	server := newTestCA(t)
	certFile, keyFile, _ := server.leaf(t, dir, "a.test")
	var routes strings.Builder
	for name, source := range map[string]string{"fp": "ja4", "fpip": "ja4+client_ip", "ip": "client_ip"} {
		fmt.Fprintf(&routes, "route %q {\n  path = \"/%s\"\n  upstream = %q\n  policy = \"five\"\n  subject = [%q]\n}\n", name, name, up.URL, source)
	}
	src := fmt.Sprintf(`
listen {
  https = "127.0.0.1:0"
  admin = "127.0.0.1:0"
}
tls {
  certificate {
    cert_file = %q
    key_file  = %q
  }
}
subject {
  trusted_proxies = ["127.0.0.1/32"]
}
policy "five" {
  algorithm = "fixed-window"
  limit     = 5
  window    = "1h"
}
%s`, certFile, keyFile, routes.String())
	path := filepath.Join(dir, "gateway.hcl")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return &mtlsRunning{running: startFile(t, path), roots: server.pool}
}

// countStatuses sends n requests to path from c, the i-th forwarded for
// the address forwardedFor(i), and counts the answers by status.
func (r *mtlsRunning) countStatuses(t *testing.T, c *http.Client, path string, n int, forwardedFor func(i int) string) map[int]int {
	t.Helper()
	counts := map[int]int{}
	for i := range n {
		req, _ := http.NewRequest("GET", "https://"+r.servers.HTTPSAddr().String()+path, nil)
		req.Header.Set("X-Forwarded-For", forwardedFor(i))
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		counts[res.StatusCode]++
	}
	return counts
}

// A client that rotates through 1,000 addresses behind a trusted proxy
// earns 1,000 budgets by address, but stays one subject under ja4: its
// ClientHello does not change. ja4+client_ip is per address again; a
// client with another ClientHello has a budget of its own; and neither
// the fingerprint nor an address reaches the log.
func TestJA4HoldsAClientThatRotatesAddresses(t *testing.T) {
	r := ja4Gateway(t)
	rotating := func(i int) string { return fmt.Sprintf("198.51.%d.%d", 100+i/250, 1+i%250) }
	client := r.mtlsClient(nil)
	if got := r.countStatuses(t, client, "/ip", 1000, rotating); got[200] != 1000 {
		t.Fatalf("by address: %v, want 1000 admitted", got)
	}
	if got := r.countStatuses(t, client, "/fp", 1000, rotating); got[200] != 5 || got[429] != 995 {
		t.Fatalf("by ja4: %v, want 5 admitted and 995 refused", got)
	}
	if got := r.countStatuses(t, client, "/fpip", 10, rotating); got[200] != 10 {
		t.Fatalf("by ja4+client_ip: %v, want 10 admitted", got)
	}
	if got := r.countStatuses(t, client, "/fpip", 6, func(int) string { return "203.0.113.9" }); got[200] != 5 || got[429] != 1 {
		t.Fatalf("by ja4+client_ip from one address: %v", got)
	}
	cfg := r.clientConfig(nil)
	cfg.MaxVersion = tls.VersionTLS12
	other := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	if got := r.countStatuses(t, other, "/fp", 1, rotating); got[200] != 1 {
		t.Fatalf("another ClientHello: %v, want its own budget", got)
	}
	logs := r.logs.String()
	for _, raw := range []string{"t13d", "t12d", "198.51.100.7"} {
		if strings.Contains(logs, raw) {
			t.Fatalf("the log holds %q", raw)
		}
	}
	if !strings.Contains(logs, `"subject_kind":"ja4"`) {
		t.Fatalf("no ja4 subject in the access log:\n%.2000s", logs)
	}
}
