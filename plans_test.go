package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func keyLine(key, plan string) string {
	sum := sha256.Sum256([]byte(key))
	return strings.TrimSpace(hex.EncodeToString(sum[:]) + " " + plan)
}

// TestPlansThroughTheCLI runs the gateway from a file whose keys carry
// plans: a gold key and a plain one get their own limits on one route, and
// a key whose plan changes in the keys file gets the new plan's budget
// after SIGHUP.
func TestPlansThroughTheCLI(t *testing.T) {
	// The backend of the legacy example in docs/guide.md: it records what
	// arrives and names itself.
	arrived := make(chan *http.Request, 64)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- r.Clone(r.Context())
		w.Header().Set("Server", "Apache/1.3.42")
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	dir := t.TempDir()
	keys := filepath.Join(dir, "api-keys.txt")
	writeKeys := func(lines ...string) {
		t.Helper()
		if err := os.WriteFile(keys, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeKeys("# hash plan", keyLine("gold-customer-key", "gold"), keyLine("plain-customer-key", ""))
	path := filepath.Join(dir, "gateway.hcl")
	src := fmt.Sprintf(`
listen {
  http  = "127.0.0.1:0"
  admin = "127.0.0.1:0"
}
subject {
  api_keys_file = "api-keys.txt"
}
policy "free-orders" {
  algorithm = "fixed-window"
  limit     = 2
  window    = "1h"
}
policy "gold-orders" {
  algorithm = "fixed-window"
  limit     = 5
  window    = "1h"
}
route "orders.read" {
  path           = "/orders"
  upstream       = %q
  rewrite_prefix = "/cgi-bin/orders"
  host_header    = "orders.internal"
  subject        = ["api_key"]
  policy         = "free-orders"
  plans          = { gold = "gold-orders" }
  request_headers {
    set    = { "X-Gateway" = "edge" }
    remove = ["X-Debug"]
  }
  response_headers {
    set    = { "Cache-Control" = "no-store" }
    remove = ["Server"]
  }
}
`, up.URL)
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	r := startFile(t, path)
	// get sends what the guide's client sends and returns the answer
	// and, when it was forwarded, what the backend received.
	get := func(key, path string) (*http.Response, *http.Request) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+r.servers.HTTPAddr().String()+path, nil)
		req.Header.Set("X-API-Key", key)
		req.Header.Set("X-Debug", "1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			return res, nil
		}
		return res, <-arrived
	}
	statuses := func(key string, n int) string {
		t.Helper()
		var s []string
		for i := 0; i < n; i++ {
			res, _ := get(key, "/orders/7?x=1")
			s = append(s, fmt.Sprint(res.StatusCode))
		}
		return strings.Join(s, " ")
	}

	res, got := get("gold-customer-key", "//orders/./7?x=1")
	if got == nil {
		t.Fatalf("status %d", res.StatusCode)
	}
	if got.RequestURI != "/cgi-bin/orders/7?x=1" || got.Host != "orders.internal" ||
		got.Header.Get("X-Gateway") != "edge" || got.Header.Get("X-Debug") != "" ||
		got.Header.Get("X-API-Key") != "gold-customer-key" || got.Header.Get("X-Forwarded-For") != "127.0.0.1" {
		t.Errorf("the backend received %s Host %s %v", got.RequestURI, got.Host, got.Header)
	}
	if res.Header.Get("Cache-Control") != "no-store" || res.Header.Get("Server") != "" || res.Header.Get("RateLimit-Policy") != `"gold-orders";q=5;w=3600` {
		t.Errorf("response headers %v", res.Header)
	}
	if got := statuses("gold-customer-key", 5); got != "200 200 200 200 429" {
		t.Fatalf("gold key: %s", got)
	}
	if got := statuses("plain-customer-key", 3); got != "200 200 429" {
		t.Fatalf("plain key: %s", got)
	}
	if v := r.metricValue(t, `gateway_requests_total{outcome="denied",plan="gold",route="orders.read",status="429"}`); v != 1 {
		t.Errorf("gold denials counted %v, want 1", v)
	}
	if v := r.metricValue(t, `gateway_requests_total{outcome="allowed",plan="none",route="orders.read",status="200"}`); v != 2 {
		t.Errorf("plain admissions counted %v, want 2", v)
	}

	t.Run("after SIGHUP a key that became gold gets the gold budget", func(t *testing.T) {
		writeKeys(keyLine("gold-customer-key", "gold"), keyLine("plain-customer-key", "gold"))
		r.reload(t, "ok")
		if got := statuses("plain-customer-key", 6); got != "200 200 200 200 200 429" {
			t.Fatalf("upgraded key: %s", got)
		}
		if got := statuses("gold-customer-key", 1); got != "429" {
			t.Fatalf("the gold key's budget did not survive the reload: %s", got)
		}
	})
	t.Run("a key that lost its plan is back on the default policy", func(t *testing.T) {
		writeKeys(keyLine("gold-customer-key", ""), keyLine("plain-customer-key", "gold"))
		r.reload(t, "ok")
		if got := statuses("gold-customer-key", 3); got != "200 200 429" {
			t.Fatalf("downgraded key: %s", got)
		}
	})
	if logs := r.logs.String(); !strings.Contains(logs, `"plan":"gold"`) || strings.Contains(logs, "customer-key") {
		t.Fatalf("the access log should name the plan and never a key:\n%s", logs)
	}
}
