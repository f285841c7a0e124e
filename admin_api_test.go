package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// adminCall makes a request to the admin listener with the Authorization
// header given ("" for none) and returns the status, the headers and the
// body.
func (r *running) adminCall(t *testing.T, method, path, authorization string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+r.servers.AdminAddr().String()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, body
}

func wantProblem(t *testing.T, status int, header http.Header, body []byte, wantStatus int, wantType string) {
	t.Helper()
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
	}
	if status != wantStatus || header.Get("Content-Type") != "application/problem+json" || json.Unmarshal(body, &p) != nil || p.Type != wantType || p.Status != wantStatus {
		t.Errorf("status %d %s %s, want a %d problem of type %s", status, header.Get("Content-Type"), body, wantStatus, wantType)
	}
}

func TestAdminAPIIsNotThereWithoutAnAdminBlock(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	r := start(t, up.URL)
	status, header, body := r.adminCall(t, "GET", "/v1/routes", "Bearer anything-at-all-0123456789")
	wantProblem(t, status, header, body, 404, "urn:edge-gateway:problem:admin-not-found")
}

func TestAdminAPIListsTheRoutesToItsTokenOnly(t *testing.T) {
	const token = "test-only-admin-token-8b2e4f"
	t.Setenv("GATEWAY_TEST_ADMIN_TOKEN", token)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	dir := t.TempDir()
	path := filepath.Join(dir, "gateway.hcl")
	src := strings.ReplaceAll(`
listen {
  http  = "127.0.0.1:0"
  admin = "127.0.0.1:0"
}
admin {
  token = env("GATEWAY_TEST_ADMIN_TOKEN")
}
policy "per-client" {
  algorithm = "fixed-window"
  limit     = 100
  window    = "1m"
}
policy "per-day" {
  algorithm     = "token-bucket"
  capacity      = 1000
  refill_tokens = 1000
  refill_period = "24h"
  mode          = "shadow"
}
route "orders.read" {
  path     = "/orders"
  methods  = ["GET"]
  upstream = "UP"
  policies = ["per-client", "per-day"]
  subject  = ["client_ip"]
}
`, "UP", up.URL)
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	r := startFile(t, path)

	t.Run("without a token: 401", func(t *testing.T) {
		status, header, body := r.adminCall(t, "GET", "/v1/routes", "")
		wantProblem(t, status, header, body, 401, "urn:edge-gateway:problem:admin-unauthorized")
		if header.Get("WWW-Authenticate") == "" {
			t.Error("no WWW-Authenticate challenge")
		}
	})
	for name, auth := range map[string]string{
		"with a wrong token: 401":          "Bearer test-only-admin-token-8b2e4X",
		"with the token as another scheme": "Basic " + token,
		"with a prefix of the token":       "Bearer " + token[:len(token)-1],
		"with the token and more after it": "Bearer " + token + "x",
	} {
		t.Run(name, func(t *testing.T) {
			status, header, body := r.adminCall(t, "GET", "/v1/routes", auth)
			wantProblem(t, status, header, body, 401, "urn:edge-gateway:problem:admin-unauthorized")
		})
	}
	t.Run("with the token: the routes, their policies and modes", func(t *testing.T) {
		status, header, body := r.adminCall(t, "GET", "/v1/routes", "Bearer "+token)
		if status != 200 || header.Get("Content-Type") != "application/json" {
			t.Fatalf("status %d %s: %s", status, header.Get("Content-Type"), body)
		}
		var got struct {
			Routes []struct {
				Name     string
				Path     string
				Methods  []string
				Upstream string
				Subject  []string
				Policies []struct {
					Name, Algorithm, Mode string
					Limit, Capacity       int64
					WindowMillis          int64 `json:"window_ms"`
				}
			}
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		if len(got.Routes) != 1 {
			t.Fatalf("routes %s", body)
		}
		rt := got.Routes[0]
		if rt.Name != "orders.read" || rt.Path != "/orders" || strings.Join(rt.Methods, ",") != "GET" || rt.Upstream != up.URL || strings.Join(rt.Subject, ",") != "client_ip" || len(rt.Policies) != 2 {
			t.Fatalf("route %+v", rt)
		}
		p, q := rt.Policies[0], rt.Policies[1]
		if p.Name != "per-client" || p.Algorithm != "fixed-window" || p.Limit != 100 || p.WindowMillis != 60000 || p.Mode != "enforce" {
			t.Errorf("first policy %+v", p)
		}
		if q.Name != "per-day" || q.Algorithm != "token-bucket" || q.Capacity != 1000 || q.Mode != "shadow" {
			t.Errorf("second policy %+v", q)
		}
	})
	t.Run("another path: 404", func(t *testing.T) {
		status, header, body := r.adminCall(t, "GET", "/v1/nothing", "Bearer "+token)
		wantProblem(t, status, header, body, 404, "urn:edge-gateway:problem:admin-not-found")
	})
	t.Run("another method: 405", func(t *testing.T) {
		status, header, body := r.adminCall(t, "DELETE", "/v1/routes", "Bearer "+token)
		wantProblem(t, status, header, body, 405, "urn:edge-gateway:problem:method-not-allowed")
		if header.Get("Allow") != "GET, HEAD" {
			t.Errorf("Allow %q", header.Get("Allow"))
		}
	})
	t.Run("a reload changes the token", func(t *testing.T) {
		const next = "test-only-admin-token-next-91c3"
		t.Setenv("GATEWAY_TEST_ADMIN_TOKEN", next)
		r.reload(t, "ok")
		if status, _, body := r.adminCall(t, "GET", "/v1/routes", "Bearer "+token); status != 401 {
			t.Errorf("the old token after the reload: %d %s", status, body)
		}
		if status, _, body := r.adminCall(t, "GET", "/v1/routes", "Bearer "+next); status != 200 {
			t.Errorf("the new token after the reload: %d %s", status, body)
		}
	})
	t.Run("not on the public listener", func(t *testing.T) {
		req, _ := http.NewRequest("GET", "http://"+r.servers.HTTPAddr().String()+"/v1/routes", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 404 {
			t.Errorf("public listener: %d", res.StatusCode)
		}
	})
}
