package proxy_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
)

const testAdminToken = "test-only-admin-token-0123456789"

// adminCall calls g's admin API and returns the status and body.
func adminCall(t *testing.T, g *gateway, method, path, body string) (int, string) {
	t.Helper()
	srv := httptest.NewServer(g.handler.AdminAPI())
	defer srv.Close()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

type listedOverride struct {
	Route, Policy, Pseudonym string
	SubjectKind              string `json:"subject_kind"`
	Limit                    int64
	Applies                  bool
}

func listOverrides(t *testing.T, g *gateway) []listedOverride {
	t.Helper()
	status, body := adminCall(t, g, "GET", "/v1/overrides", "")
	var v struct{ Overrides []listedOverride }
	if status != http.StatusOK || json.Unmarshal([]byte(body), &v) != nil {
		t.Fatalf("GET /v1/overrides: %d %s", status, body)
	}
	return v.Overrides
}

// overridesRoute is a route of 2 a minute per API key.
func overridesRoute(t *testing.T, p *limiter.Policy) proxy.Route {
	rt := route("mail.send", "/mail", newUpstream(t), t, p)
	rt.Subject = []subject.Kind{subject.APIKey, subject.ClientIP}
	return rt
}

func overridePath(key string) string {
	return "/v1/overrides?route=mail.send&subject=" + url.QueryEscape("api_key:"+key)
}

func overrideBody(limit int, expires time.Time) string {
	return `{"policy": "per-key", "limit": ` + strconv.Itoa(limit) + `, "expires": "` + expires.UTC().Format(time.RFC3339) + `"}`
}

func TestAdminOverrides(t *testing.T) {
	p := policy(limitertest.FixedWindow(2, time.Minute), "per-key")
	g := newGateway(t, setup{routes: []proxy.Route{overridesRoute(t, p)}, adminToken: testAdminToken})
	key := []string{"X-API-Key", "known-key-one"}

	status, body := adminCall(t, g, "PUT", overridePath("known-key-one"), overrideBody(5, time.Now().Add(365*24*time.Hour)))
	if status != http.StatusOK || strings.Contains(body, "known-key-one") || !strings.Contains(body, `"applies": true`) {
		t.Fatalf("PUT: %d %s", status, body)
	}
	wantStatuses(t, statuses(t, g, "/mail", 6, key...), 200, 200, 200, 200, 200, 429)
	wantStatuses(t, statuses(t, g, "/mail", 3, "X-API-Key", "known-key-two"), 200, 200, 429)
	// The headers name the configured quota; what is left follows the
	// override.
	if got := g.get(t, "/mail", key...).Header; !strings.Contains(got.Get("RateLimit-Policy"), `"per-key";q=2`) || !strings.Contains(got.Get("RateLimit"), "r=0") {
		t.Errorf("headers under the override: %v", got)
	}
	list := listOverrides(t, g)
	if len(list) != 1 || list[0].Limit != 5 || list[0].SubjectKind != "api_key" || !list[0].Applies || list[0].Pseudonym == "" {
		t.Fatalf("list %+v", list)
	}
	logs := g.logs.String()
	if !strings.Contains(logs, `"msg":"admin override set"`) || !strings.Contains(logs, list[0].Pseudonym) || strings.Contains(logs, "known-key-one") {
		t.Errorf("the audit line: %s", logs)
	}

	for _, bad := range []struct{ path, body string }{
		{overridePath("known-key-one"), `{"policy": "nope", "limit": 5, "expires": "2030-01-01T00:00:00Z"}`},
		{overridePath("known-key-one"), `{"policy": "per-key", "limit": 0, "expires": "2030-01-01T00:00:00Z"}`},
		{overridePath("known-key-one"), `{"policy": "per-key", "limit": 5, "expires": "tomorrow"}`},
		{overridePath("known-key-one"), `{"policy": "per-key", "limit": 5, "expires": "2020-01-01T00:00:00Z"}`},
		{overridePath("known-key-one"), `{"policy": "per-key", "limit": 5, "expires": "2030-01-01T00:00:00Z", "more": 1}`},
		{overridePath("made-up-key"), overrideBody(5, time.Now().Add(365*24*time.Hour))},
	} {
		if status, body := adminCall(t, g, "PUT", bad.path, bad.body); status != http.StatusBadRequest {
			t.Errorf("PUT %s %s: %d %s, want 400", bad.path, bad.body, status, body)
		}
	}

	// A reload that drops the policy keeps the override, listed as
	// applying to nothing; one that brings it back applies it again.
	other := policy(limitertest.FixedWindow(2, time.Minute), "other")
	if err := g.handler.Swap(proxy.Config{Routes: []proxy.Route{overridesRoute(t, other)}, Resolver: newResolver(t, nil), Limiter: g.lim, AdminToken: testAdminToken}); err != nil {
		t.Fatal(err)
	}
	if list := listOverrides(t, g); len(list) != 1 || list[0].Applies {
		t.Fatalf("after a reload without the policy: %+v, want it listed, applying to nothing", list)
	}

	if status, _ := adminCall(t, g, "DELETE", "/v1/overrides?route=mail.send&policy=per-key&pseudonym="+url.QueryEscape(list[0].Pseudonym), ""); status != http.StatusNoContent {
		t.Fatalf("DELETE: %d", status)
	}
	if status, _ := adminCall(t, g, "DELETE", "/v1/overrides?route=mail.send&policy=per-key&pseudonym="+url.QueryEscape(list[0].Pseudonym), ""); status != http.StatusNotFound {
		t.Fatalf("DELETE again: %d, want 404", status)
	}
	if list := listOverrides(t, g); len(list) != 0 {
		t.Fatalf("after DELETE: %+v", list)
	}
}

// TestAdminOverridesAcrossGatewaysOnRedis: an override set on one gateway
// applies on the other at once, with no Redis call of its own per request.
func TestAdminOverridesAcrossGatewaysOnRedis(t *testing.T) {
	s := redistest.Start(t)
	p := redisPolicy(limitertest.FixedWindow(2, time.Minute), "per-key")
	p.Name = "per-key"
	prefix := "ov" + limitertest.Subject()[3:9] + ":"
	var gs []*gateway
	for range 2 {
		gs = append(gs, newGateway(t, setup{routes: []proxy.Route{overridesRoute(t, p)}, adminToken: testAdminToken,
			limiter: redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}, KeyPrefix: prefix})}))
	}
	a, b := gs[0], gs[1]
	key := []string{"X-API-Key", "known-key-one"}
	wantStatuses(t, statuses(t, b, "/mail", 3, key...), 200, 200, 429) // b remembers the denial
	if status, body := adminCall(t, a, "PUT", overridePath("known-key-one"), overrideBody(4, time.Now().Add(time.Hour))); status != http.StatusOK {
		t.Fatalf("PUT on a: %d %s", status, body)
	}
	// Within 1 s on b: the publish drops b's remembered denial.
	deadline := time.Now().Add(time.Second)
	for b.get(t, "/mail", key...).StatusCode != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("b still refuses 1 s after the override was set on a")
		}
		time.Sleep(10 * time.Millisecond)
	}
	client := s.Client(t)
	before := commandCounts(t, client)
	wantStatuses(t, statuses(t, b, "/mail", 2, key...), 200, 429)
	after := commandCounts(t, client)
	for cmd, n := range after {
		d := n - before[cmd]
		switch cmd {
		case "evalsha":
			if d != 2 {
				t.Errorf("%d EVALSHA for 2 requests", d)
			}
		case "info":
		case "get", "hmget", "hset", "pexpire", "time":
			// Inside the script.
		default:
			if d != 0 {
				t.Errorf("%d %s calls beside the requests' scripts", d, cmd)
			}
		}
	}
	if status, _ := adminCall(t, b, "DELETE", overridePath("known-key-one")+"&policy=per-key", ""); status != http.StatusNoContent {
		t.Fatalf("DELETE on b: %d", status)
	}
	if list := listOverrides(t, a); len(list) != 0 {
		t.Fatalf("a lists %+v after the DELETE on b", list)
	}
}

// commandCounts are the calls of each command Redis has served.
func commandCounts(t *testing.T, c *redis.Client) map[string]int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for line := range strings.SplitSeq(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, stats, _ := strings.Cut(rest, ":calls=")
		n, _ := strconv.Atoi(stats[:strings.IndexByte(stats, ',')])
		counts[name] = n
	}
	return counts
}
