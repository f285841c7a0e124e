package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/edgegate/gateway/limiter/redistest"
)

// ja4Gateway is an HTTPS gateway with routes of five requests an hour per
// fingerprint ("/fp"), per fingerprint and address ("/pair") and per
// address ("/ip"); on Redis at redisAddr when it is not empty. Its
// clients' fingerprints differ by their highest TLS version; each of
// their connections comes from the loopback address from returns, a new
// connection for each request.
func ja4Gateway(t *testing.T, redisAddr string) (*running, func(maxVersion uint16, from func() string) *http.Client) {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(up.Close)
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile, keyFile, _ := ca.leaf(t, dir, "a.test")
	backend := ""
	if redisAddr != "" {
		backend = fmt.Sprintf("limiter {\n  backend = \"redis\"\n  redis { addrs = [%q] }\n}\n", redisAddr)
	}
	route := func(name, source string) string {
		return fmt.Sprintf("route %q {\n  path     = \"/%s\"\n  upstream = %q\n  policy   = \"five\"\n  subject  = [%q]\n}\n", name, name, up.URL, source)
	}
	path := writeGateway(t, pseudonymFromFile+backend+fmt.Sprintf(`
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
policy "five" {
  algorithm = "fixed-window"
  limit     = 5
  window    = "1h"
}
`, certFile, keyFile)+route("fp", "ja4")+route("pair", "ja4+client_ip")+route("ip", "client_ip"))
	r := startFile(t, path)
	client := func(maxVersion uint16, from func() string) *http.Client {
		c := &tls.Config{ServerName: "a.test", RootCAs: ca.pool, MaxVersion: maxVersion}
		tr := &http.Transport{TLSClientConfig: c, ForceAttemptHTTP2: true, DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from())}}
				return d.DialContext(ctx, network, addr)
			}}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr}
	}
	return r, client
}

// rotating returns the next of 1,000 loopback addresses at each call.
func rotating() func() string {
	i := 0
	return func() string {
		i++
		return fmt.Sprintf("127.1.%d.%d", i/250, i%250+1)
	}
}

// statusesFrom sends n requests to path with c, and counts the statuses.
func statusesFrom(t *testing.T, r *running, c *http.Client, path string, n int) map[int]int {
	t.Helper()
	counts := map[int]int{}
	for range n {
		req, _ := http.NewRequest("GET", "https://"+r.servers.HTTPSAddr().String()+path, nil)
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		counts[res.StatusCode]++
	}
	return counts
}

// A client that rotates through 1,000 addresses is still one subject
// under ja4: one TLS fingerprint.
func TestJA4HoldsAClientThatRotatesAddresses(t *testing.T) {
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			addr := ""
			var redis *redistest.Server
			if backend == "redis" {
				redis = redistest.Start(t)
				addr = redis.Addr
			}
			r, client := ja4Gateway(t, addr)
			one := client(0, rotating())
			if got := statusesFrom(t, r, one, "/fp", 1000); got[200] != 5 || got[429] != 995 {
				t.Fatalf("under ja4, 1,000 addresses with one fingerprint: %v, want 5 allowed", got)
			}
			// Another fingerprint is another subject.
			other := client(tls.VersionTLS12, rotating())
			if got := statusesFrom(t, r, other, "/fp", 6); got[200] != 5 || got[429] != 1 {
				t.Fatalf("another fingerprint: %v, want its own 5", got)
			}
			// Per address, rotation escapes; per fingerprint and address,
			// each address has its own budget and one address is held.
			if got := statusesFrom(t, r, one, "/ip", 20); got[200] != 20 {
				t.Fatalf("under client_ip: %v", got)
			}
			if got := statusesFrom(t, r, one, "/pair", 20); got[200] != 20 {
				t.Fatalf("under ja4+client_ip, rotating: %v", got)
			}
			fixed := client(0, func() string { return "127.2.0.9" })
			if got := statusesFrom(t, r, fixed, "/pair", 6); got[200] != 5 || got[429] != 1 {
				t.Fatalf("under ja4+client_ip, one address: %v", got)
			}
			if logs := r.logs.String(); strings.Contains(logs, "t13d") || strings.Contains(logs, "t12d") {
				t.Fatalf("the log holds a fingerprint:\n%s", logs)
			}
			if redis != nil {
				keys, err := redis.Client(t).Keys(context.Background(), "*").Result()
				if err != nil || len(keys) == 0 {
					t.Fatalf("Redis keys %v, %v", keys, err)
				}
				for _, k := range keys {
					if strings.Contains(k, "t13d") || strings.Contains(k, "127.") {
						t.Fatalf("a Redis key holds a raw identity: %s", k)
					}
				}
			}
		})
	}
}

// ja4 needs the HTTPS listener, where the gateway sees ClientHellos.
func TestJA4NeedsHTTPS(t *testing.T) {
	path := writeGateway(t, anyPorts+`
route "fp" {
  path     = "/fp"
  upstream = "http://127.0.0.1:9"
  subject  = ["ja4+client_ip"]
}
`)
	var out strings.Builder
	if code := run([]string{"validate", "-config", path}, nil, &out, &out, nil); code == 0 || !strings.Contains(out.String(), "ja4+client_ip needs listen.https") {
		t.Fatalf("validate gave %d:\n%s", code, out.String())
	}
}
