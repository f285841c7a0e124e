package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter/redistest"
)

const limitsToken = "test-only-admin-token-5d1c0a77"

// limitsConfigOn is a gateway with the admin API, a route limited per
// client address by two policies, and the backend given: memory (no
// addrs), or a Redis of the mode given at addrs.
func limitsConfigOn(t *testing.T, upstream, mode string, addrs ...string) string {
	t.Helper()
	redisAddr := ""
	if len(addrs) > 0 && addrs[0] != "" {
		quoted := make([]string, len(addrs))
		for i, a := range addrs {
			quoted[i] = strconv.Quote(a)
		}
		redisAddr = strings.Join(quoted, ", ")
	}
	backend := ""
	if redisAddr != "" {
		backend = fmt.Sprintf(`
limiter {
  backend = "redis"
  redis {
    mode       = %q
    addrs      = [%s]
    key_prefix = "admin:"
  }
}`, mode, redisAddr)
	}
	return writeGateway(t, anyPorts+pseudonymFromFile+fmt.Sprintf(`
admin {
  token = env("GATEWAY_TEST_ADMIN_TOKEN")
}
%s
policy "per-client" {
  algorithm = "fixed-window"
  limit     = 3
  window    = "1h"
}
policy "bucket" {
  algorithm     = "token-bucket"
  capacity      = 10
  refill_tokens = 1
  refill_period = "1h"
}
route "orders.read" {
  path     = "/orders"
  upstream = %q
  policies = ["per-client", "bucket"]
  subject  = ["client_ip"]
}
`, backend, upstream))
}

type limitsAnswer struct {
	Route       string `json:"route"`
	SubjectKind string `json:"subject_kind"`
	Pseudonym   string `json:"pseudonym"`
	Reset       bool   `json:"reset"`
	Policies    []struct {
		Policy       string `json:"policy"`
		Algorithm    string `json:"algorithm"`
		Limit        int64  `json:"limit"`
		Remaining    int64  `json:"remaining"`
		ResetAfterMS int64  `json:"reset_after_ms"`
	} `json:"policies"`
}

func (r *running) limits(t *testing.T, method, query string) limitsAnswer {
	t.Helper()
	status, header, body := r.adminCall(t, method, "/v1/limits?"+query, "Bearer "+limitsToken)
	if status != 200 || header.Get("Content-Type") != "application/json" {
		t.Fatalf("%s /v1/limits?%s: %d %s", method, query, status, body)
	}
	var a limitsAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return a
}

// order sends one request to the public listener and returns its status
// and RateLimit header.
func (r *running) order(t *testing.T) (int, string) {
	t.Helper()
	res, err := http.Get("http://" + r.servers.HTTPAddr().String() + "/orders")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode, res.Header.Get("RateLimit")
}

// wantHeaderState checks that a's policies say what the RateLimit header
// h said: r as remaining, t as reset_after_ms rounded up to seconds.
func wantHeaderState(t *testing.T, a limitsAnswer, h string) {
	t.Helper()
	members := strings.Split(h, ", ")
	if len(members) != len(a.Policies) {
		t.Fatalf("RateLimit %q, state %+v", h, a.Policies)
	}
	for i, m := range members {
		p := a.Policies[i]
		want := fmt.Sprintf("%q;r=%d;t=%d", p.Policy, p.Remaining, (p.ResetAfterMS+999)/1000)
		if m != want {
			// The read comes a moment after the request: t may be a
			// second less.
			alt := fmt.Sprintf("%q;r=%d;t=%d", p.Policy, p.Remaining, (p.ResetAfterMS+999)/1000+1)
			if m != alt {
				t.Errorf("RateLimit member %q, state %+v (%q)", m, p, want)
			}
		}
	}
}

const clientQuery = "route=orders.read&subject=client_ip:127.0.0.1"

func testLimitsAPI(t *testing.T, mode string, addrs ...string) {
	t.Setenv("GATEWAY_TEST_ADMIN_TOKEN", limitsToken)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	r := startFile(t, limitsConfigOn(t, up.URL, mode, addrs...))

	fresh := r.limits(t, "GET", clientQuery)
	if fresh.Route != "orders.read" || fresh.SubjectKind != "client_ip" || !strings.HasPrefix(fresh.Pseudonym, "v1:") || len(fresh.Policies) != 2 {
		t.Fatalf("fresh subject %+v", fresh)
	}
	if p := fresh.Policies[0]; p.Policy != "per-client" || p.Algorithm != "fixed-window" || p.Limit != 3 || p.Remaining != 3 {
		t.Errorf("fresh per-client %+v", p)
	}
	if p := fresh.Policies[1]; p.Policy != "bucket" || p.Algorithm != "token-bucket" || p.Limit != 10 || p.Remaining != 10 {
		t.Errorf("fresh bucket %+v", p)
	}
	var header string
	for range 2 {
		status, h := r.order(t)
		if status != 200 {
			t.Fatalf("status %d", status)
		}
		header = h
	}
	for range 3 { // reading charges nothing
		wantHeaderState(t, r.limits(t, "GET", clientQuery), header)
	}
	if status, h := r.order(t); status != 200 || !strings.HasPrefix(h, `"per-client";r=0;`) {
		t.Fatalf("the third request: %d %q; a read was charged", status, h)
	}
	if status, _ := r.order(t); status != 429 {
		t.Fatalf("the fourth request: %d, want 429", status)
	}
	spent := r.limits(t, "GET", clientQuery)
	if spent.Policies[0].Remaining != 0 || spent.Policies[1].Remaining != 7 {
		t.Fatalf("spent %+v", spent.Policies)
	}

	reset := r.limits(t, "DELETE", clientQuery)
	if !reset.Reset || reset.Policies[0].Remaining != 3 || reset.Policies[1].Remaining != 10 || reset.Pseudonym != fresh.Pseudonym {
		t.Fatalf("reset %+v", reset)
	}
	if status, h := r.order(t); status != 200 || !strings.HasPrefix(h, `"per-client";r=2;`) {
		t.Fatalf("after the reset: %d %q", status, h)
	}
	var audit string
	for _, line := range strings.Split(r.logs.String(), "\n") {
		if strings.Contains(line, `"admin reset"`) {
			audit = line
		}
	}
	if !strings.Contains(audit, `"route":"orders.read"`) || !strings.Contains(audit, `"pseudonym":"`+fresh.Pseudonym+`"`) || strings.Contains(audit, "127.0.0.1") {
		t.Errorf("audit line %q", audit)
	}

	for name, c := range map[string]struct {
		query  string
		status int
		typ    string
	}{
		"no subject: 400":             {"route=orders.read", 400, "urn:edge-gateway:problem:admin-bad-query"},
		"an unknown kind: 400":        {"route=orders.read&subject=cookie:x", 400, "urn:edge-gateway:problem:admin-bad-query"},
		"a kind the route lacks: 400": {"route=orders.read&subject=principal:alice", 400, "urn:edge-gateway:problem:admin-bad-query"},
		"not an address: 400":         {"route=orders.read&subject=client_ip:nowhere", 400, "urn:edge-gateway:problem:admin-bad-query"},
		"an unknown route: 404":       {"route=nothing&subject=client_ip:127.0.0.1", 404, "urn:edge-gateway:problem:admin-not-found"},
	} {
		t.Run(name, func(t *testing.T) {
			status, header, body := r.adminCall(t, "GET", "/v1/limits?"+c.query, "Bearer "+limitsToken)
			wantProblem(t, status, header, body, c.status, c.typ)
		})
	}
	t.Run("without the token: 401", func(t *testing.T) {
		status, header, body := r.adminCall(t, "DELETE", "/v1/limits?"+clientQuery, "")
		wantProblem(t, status, header, body, 401, "urn:edge-gateway:problem:admin-unauthorized")
	})
	t.Run("another method: 405", func(t *testing.T) {
		status, header, body := r.adminCall(t, "POST", "/v1/limits?"+clientQuery, "Bearer "+limitsToken)
		wantProblem(t, status, header, body, 405, "urn:edge-gateway:problem:method-not-allowed")
	})
}

func TestAdminLimitsReadAndResetASubjectOnMemory(t *testing.T) {
	testLimitsAPI(t, "")
}

func TestAdminLimitsReadAndResetASubjectOnRedis(t *testing.T) {
	testLimitsAPI(t, "standalone", redistest.Start(t).Addr)
}

func TestAdminLimitsReadAndResetASubjectOnCluster(t *testing.T) {
	testLimitsAPI(t, "cluster", redistest.StartClusterWithReplicas(t).Addrs()...)
}

// Two gateways share a Redis, and each remembers the subject's denial; a
// reset on one frees the subject on the other within a second.
func TestAdminResetOnOneGatewayFreesTheSubjectOnAnother(t *testing.T) {
	testResetAcrossGateways(t, "standalone", redistest.Start(t).Addr)
}

// The same on Redis Cluster: the keys share the subject's hash tag, and
// the publish reaches the subscribers of every node.
func TestAdminResetOnOneGatewayFreesTheSubjectOnAnotherOnCluster(t *testing.T) {
	testResetAcrossGateways(t, "cluster", redistest.StartClusterWithReplicas(t).Addrs()...)
}

func testResetAcrossGateways(t *testing.T, mode string, addrs ...string) {
	t.Setenv("GATEWAY_TEST_ADMIN_TOKEN", limitsToken)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	a := startFile(t, limitsConfigOn(t, up.URL, mode, addrs...))
	b := startFile(t, limitsConfigOn(t, up.URL, mode, addrs...))
	t.Cleanup(func() {
		// One SIGTERM while both still watch signals stops both; each
		// gateway's own cleanup would send another, which could reach
		// the process after both stopped watching.
		syscall.Kill(os.Getpid(), syscall.SIGTERM)
		<-a.exited
		<-b.exited
	})
	for range 3 {
		if status, _ := a.order(t); status != 200 {
			t.Fatalf("status %d", status)
		}
	}
	for _, g := range []*running{a, b, a, b} { // the second asks answer from the denial cache
		if status, _ := g.order(t); status != 429 {
			t.Fatalf("over the limit: %d", status)
		}
	}
	a.limits(t, "DELETE", clientQuery)
	deadline := time.Now().Add(time.Second)
	for {
		status, h := b.order(t)
		if status == 200 {
			if !strings.HasPrefix(h, `"per-client";r=2;`) {
				t.Errorf("after the reset: %q", h)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the other gateway still refuses the subject a second after the reset: %d", status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
