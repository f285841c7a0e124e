package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// rlsConfig is a gateway whose route "mail" and whose rate limit service
// (over TLS, with a token) share one budget of limit a minute per client
// address.
func rlsConfig(upstream, certFile, keyFile string, limit int) string {
	return fmt.Sprintf(`
listen {
  http               = "127.0.0.1:0"
  https              = "127.0.0.1:0"
  admin              = "127.0.0.1:0"
  ratelimit_grpc     = "127.0.0.1:0"
  ratelimit_grpc_tls = true
}
tls {
  certificate {
    cert_file = %q
    key_file  = %q
  }
}
rls {
  token = env("GATEWAY_TEST_RLS_TOKEN")
}
policy "per-client" {
  algorithm = "fixed-window"
  limit     = %d
  window    = "1m"
}
route "mail" {
  path     = "/mail"
  upstream = %q
  policy   = "per-client"
  subject  = ["client_ip"]
}
rls_rule "mail" {
  domain     = "edge"
  descriptor = ["client_ip", "action=send"]
  route      = "mail"
}
`, certFile, keyFile, limit, upstream)
}

func TestRateLimitServiceThroughTheCLI(t *testing.T) {
	const token = "test-only-rls-token-5c1d9a"
	t.Setenv("GATEWAY_TEST_RLS_TOKEN", token)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile, keyFile, _ := ca.leaf(t, dir, "rls.test")
	path := writeGateway(t, rlsConfig(up.URL, certFile, keyFile, 3))
	r := startFile(t, path)

	conn, err := grpc.NewClient(r.servers.RateLimitAddr().String(),
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: ca.pool, ServerName: "rls.test"})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	authorized := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	call := func(ctx context.Context) (rlsv3.RateLimitResponse_Code, error) {
		res, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "client_ip", Value: "127.0.0.1"}, {Key: "action", Value: "send"}},
		}}})
		return res.GetOverallCode(), err
	}

	if _, err := call(context.Background()); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("without the token: %v, want Unauthenticated", err)
	}
	// The gateway's own HTTP requests come from 127.0.0.1 too: one budget.
	if res := r.get(t, "/mail"); res.StatusCode != http.StatusOK {
		t.Fatalf("HTTP: %d", res.StatusCode)
	}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if code, err := call(authorized); err != nil || code != want {
			t.Fatalf("call %d: %v %v, want %v", i, code, err, want)
		}
	}
	if res := r.get(t, "/mail"); res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("HTTP after the budget was spent over RLS: %d, want 429", res.StatusCode)
	}
	if v := r.metricValue(t, `gateway_rls_requests_total{domain="edge",outcome="over_limit"}`); v != 1 {
		t.Errorf("over_limit calls counted %v, want 1", v)
	}

	// A reload that raises the limit applies to the service at once.
	if err := os.WriteFile(path, []byte(rlsConfig(up.URL, certFile, keyFile, 10)), 0o644); err != nil {
		t.Fatal(err)
	}
	r.reload(t, "ok")
	if code, err := call(authorized); err != nil || code != rlsv3.RateLimitResponse_OK {
		t.Fatalf("after a reload to 10: %v %v, want OK", code, err)
	}

	r.stop(t, 10*time.Second)
	ctx, cancel := context.WithTimeout(authorized, 2*time.Second)
	defer cancel()
	if _, err := call(ctx); err == nil {
		t.Fatalf("after the gateway stopped: %v, want an error", err)
	}
}
