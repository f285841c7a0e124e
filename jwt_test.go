package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgegate/gateway/subject/jwttest"
)

func writeJWTConfig(t *testing.T, path, upstream, keySet string) {
	t.Helper()
	src := fmt.Sprintf(`
listen {
  http  = "127.0.0.1:0"
  admin = "127.0.0.1:0"
}
subject {
  jwt {
    %s
    issuer     = "https://idp.test/"
    audience   = ["orders-api"]
    leeway     = "30s"
    algorithms = ["RS256", "ES256", "EdDSA"]
  }
}
policy "per-user" {
  algorithm = "fixed-window"
  limit     = 100
  window    = "1h"
}
route "orders.read" {
  path     = "/orders"
  upstream = %q
  policy   = "per-user"
  subject  = ["jwt", "client_ip"]
}
`, keySet, upstream)
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (r *running) getWithToken(t *testing.T, token string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+r.servers.HTTPAddr().String()+"/orders", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

func TestTheJWKSFileIsReadAgainOnSIGHUP(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	dir := t.TempDir()
	jwks, path := filepath.Join(dir, "jwks.json"), filepath.Join(dir, "gateway.hcl")
	old, next := jwttest.EC(t, "old"), jwttest.Ed25519(t, "next")
	if err := os.WriteFile(jwks, jwttest.JWKS(old), 0o644); err != nil {
		t.Fatal(err)
	}
	writeJWTConfig(t, path, up.URL, `jwks_file = "jwks.json"`)
	r := startFile(t, path)
	exp := time.Now().Add(time.Hour)
	oldToken, nextToken := old.Sign(t, jwttest.Claims("alice", exp)), next.Sign(t, jwttest.Claims("alice", exp))

	if a, b := r.getWithToken(t, oldToken), r.getWithToken(t, nextToken); a != 200 || b != 401 {
		t.Fatalf("before the rotation: %d %d, want 200 401", a, b)
	}
	if err := os.WriteFile(jwks, jwttest.JWKS(next), 0o644); err != nil {
		t.Fatal(err)
	}
	r.reload(t, "ok")
	if a, b := r.getWithToken(t, oldToken), r.getWithToken(t, nextToken); a != 401 || b != 200 {
		t.Fatalf("after the rotation: %d %d, want 401 200", a, b)
	}
	// A broken key set is refused whole; the running keys stay.
	if err := os.WriteFile(jwks, []byte(`{"keys":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	r.reload(t, "error")
	if b := r.getWithToken(t, nextToken); b != 200 {
		t.Fatalf("after a broken key set: %d, want 200", b)
	}
}

func TestAGatewayStartsWhileItsIdentityProviderIsDown(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	k := jwttest.RSA(t, "k1")
	var down atomic.Bool
	down.Store(true)
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Write(jwttest.JWKS(k))
	}))
	defer idp.Close()
	path := filepath.Join(t.TempDir(), "gateway.hcl")
	writeJWTConfig(t, path, up.URL, fmt.Sprintf(`jwks_url = %q`, idp.URL))
	r := startFile(t, path)
	token := k.Sign(t, jwttest.Claims("alice", time.Now().Add(time.Hour)))

	if s := r.getWithToken(t, token); s != 503 {
		t.Fatalf("a token before any key set: %d, want 503", s)
	}
	if s := r.get(t, "/orders").StatusCode; s != 200 {
		t.Fatalf("no token: %d, want 200", s)
	}
	if !strings.Contains(r.logs.String(), "jwks_url could not be fetched") {
		t.Fatalf("the failed fetch was not logged:\n%s", r.logs.String())
	}
	if f, last := r.metricValue(t, `gateway_jwks_fetches_total{result="failed"}`), r.metricValue(t, "gateway_jwks_last_success_timestamp_seconds"); f < 1 || last != 0 {
		t.Fatalf("before any key set: %v failed fetches, last success %v", f, last)
	}
	down.Store(false)
	r.reload(t, "ok") // SIGHUP fetches the set again
	if s := r.getWithToken(t, token); s != 200 {
		t.Fatalf("after the provider came back: %d, want 200", s)
	}
	if ok, last := r.metricValue(t, `gateway_jwks_fetches_total{result="ok"}`), r.metricValue(t, "gateway_jwks_last_success_timestamp_seconds"); ok != 1 || last < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Fatalf("after the provider came back: %v good fetches, last success %v", ok, last)
	}
	down.Store(true)
	r.reload(t, "ok")
	if s := r.getWithToken(t, token); s != 200 {
		t.Fatalf("with the provider down again: %d, want 200 (the last good set)", s)
	}
}

// jwt.invalid_token_policy and max_token_bytes reach the request path:
// a token over max_token_bytes is refused and charged like any invalid
// one, and past the named policy's limit the client gets 429 naming it.
func TestTheInvalidTokenPolicyAndMaxTokenBytesFromTheFile(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	dir := t.TempDir()
	jwks, path := filepath.Join(dir, "jwks.json"), filepath.Join(dir, "gateway.hcl")
	k := jwttest.EC(t, "e1")
	if err := os.WriteFile(jwks, jwttest.JWKS(k), 0o644); err != nil {
		t.Fatal(err)
	}
	writeJWTConfig(t, path, up.URL, `jwks_file = "jwks.json"
    max_token_bytes      = 2048
    invalid_token_policy = "bad-tokens"`)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(f, `
policy "bad-tokens" {
  algorithm = "fixed-window"
  limit     = 2
  window    = "1h"
}
`)
	f.Close()
	r := startFile(t, path)
	exp := time.Now().Add(time.Hour)
	claims := jwttest.Claims("alice", exp)
	claims["pad"] = strings.Repeat("x", 2048)
	long := k.Sign(t, claims) // valid, but longer than max_token_bytes
	alice := k.Sign(t, jwttest.Claims("alice", exp))
	if got := []int{r.getWithToken(t, alice), r.getWithToken(t, long), r.getWithToken(t, "junk"), r.getWithToken(t, "junk")}; fmt.Sprint(got) != "[200 401 401 429]" {
		t.Fatalf("statuses %v, want [200 401 401 429]", got)
	}
	req, _ := http.NewRequest("GET", "http://"+r.servers.HTTPAddr().String()+"/orders", nil)
	req.Header.Set("Authorization", "Bearer junk")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 429 || res.Header.Get("RateLimit-Policy") != `"bad-tokens";q=2;w=3600` {
		t.Fatalf("%d, RateLimit-Policy %q", res.StatusCode, res.Header.Get("RateLimit-Policy"))
	}
	// A token verified before still passes.
	if got := r.getWithToken(t, alice); got != 200 {
		t.Fatalf("a token verified before: %d", got)
	}
}
