package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/gateway/config"
	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/subject"
)

func env(vars map[string]string) config.LookupEnv {
	return func(name string) (string, bool) { v, ok := vars[name]; return v, ok }
}

const fakeSecret = "test-only-fake-hmac-secret-0123456789abcdef"

func TestEnvReadsTheInjectedEnvironmentOnly(t *testing.T) {
	t.Setenv("GATEWAY_TEST_SECRET", "from-the-process-environment-0123456789")
	src := `
limiter {
  backend = "redis"
  redis {
    addrs    = ["127.0.0.1:6379"]
    username = env("GATEWAY_TEST_USER", "gateway")
    password = env("GATEWAY_TEST_PASSWORD")
  }
}
pseudonym {
  version = 1
  key "1" { secret = env("GATEWAY_TEST_SECRET") }
}
`
	f, diags := config.Parse("gateway.hcl", []byte(src), env(map[string]string{
		"GATEWAY_TEST_PASSWORD": "test-only-fake-password",
		"GATEWAY_TEST_SECRET":   fakeSecret,
	}))
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	if got := f.Limiter.Redis.Username; got != "gateway" {
		t.Errorf("username %q, want the env() default", got)
	}
	if got := f.Limiter.Redis.Password; got != "test-only-fake-password" {
		t.Errorf("password %q", got)
	}
	if got := string(f.Subject.PseudonymKeys[1]); got != fakeSecret {
		t.Errorf("secret %q, want the injected one", got)
	}

	// A typed attribute whose env() fails is reported once, not again as
	// a value of the wrong type.
	src = strings.Replace(src, `env("GATEWAY_TEST_USER", "gateway")`, `env("GATEWAY_TEST_USER")`, 1)
	_, diags = config.Parse("gateway.hcl", []byte(src), env(nil))
	var details []string
	for _, d := range diags {
		details = append(details, d.Detail)
	}
	all := strings.Join(details, "\n")
	if len(diags) != 3 || !strings.Contains(all, "GATEWAY_TEST_USER is not set") || !strings.Contains(all, "GATEWAY_TEST_PASSWORD is not set") || !strings.Contains(all, "GATEWAY_TEST_SECRET is not set") {
		t.Fatalf("an empty environment was not reported once per call:\n%s", all)
	}
}

// The meaning of a block never depends on where it stands in the file.
func TestBlockOrderDoesNotMatter(t *testing.T) {
	blocks := []string{
		`route "orders.read" {
  path     = "/orders"
  upstream = "http://127.0.0.1:9000"
  policy   = "per-key"
  subject  = ["api_key", "principal"]
  cost     = 2
}`,
		`policy "per-key" {
  algorithm = "fixed-window"
  limit     = 10
  window    = "1m"
  max_cost  = 2
}`,
		`subject {
  trusted_proxies  = ["10.0.0.0/8"]
  principal_header = "X-Auth-Principal"
  api_keys_file    = "../testdata/api-keys.txt"
}`,
		`listen {
  http           = ":8080"
  max_body_bytes = 4096
}`,
	}
	for _, order := range [][]int{{0, 1, 2, 3}, {3, 2, 1, 0}, {0, 3, 1, 2}} {
		var src []string
		for _, i := range order {
			src = append(src, blocks[i])
		}
		f, diags := config.Parse("gateway.hcl", []byte(strings.Join(src, "\n")), env(nil))
		if diags.HasErrors() {
			t.Fatalf("order %v: %s", order, diags.Error())
		}
		r := f.Proxy.Routes[0]
		if len(r.Policies) != 1 || r.Policies[0].Name != "per-key" || r.Cost != 2 || r.MaxBodyBytes != 4096 ||
			len(r.Subject) != 2 || r.Subject[0] != subject.APIKey || r.Subject[1] != subject.Principal {
			t.Fatalf("order %v: route %+v", order, r)
		}
	}
}

// What the file leaves out stays zero, for the consuming package's
// constructor to default; config holds no second copy of those defaults.
func TestDefaultsAreLeftToTheConstructors(t *testing.T) {
	f, diags := config.Parse("gateway.hcl", []byte(`listen { http = ":8080" }
limiter { backend = "memory" }
subject {}`), env(nil))
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	if f.Listen.ReadHeaderTimeout != 0 || f.Listen.MaxConnections != 0 || f.Listen.ShutdownTimeout != 0 {
		t.Errorf("listen %+v", f.Listen)
	}
	if f.Proxy.Deadline != 0 || f.Proxy.FailureRetryAfter != 0 || f.Limiter.Memory.MaxEntries != 0 {
		t.Errorf("limiter %+v, proxy %+v", f.Limiter, f.Proxy)
	}
	if f.Subject.ForwardedHeader != "" || f.Subject.IPv6Prefix != 0 {
		t.Errorf("subject %+v", f.Subject)
	}
	if f.Limiter.Kind != limiter.KindMemory {
		t.Errorf("kind %v", f.Limiter.Kind)
	}
}

func TestLoadRefusesAFileWithProblems(t *testing.T) {
	_, err := config.Load("../testdata/invalid/several_errors_at_once.hcl", env(nil))
	var p *config.Problems
	if !errors.As(err, &p) || len(p.Diagnostics) != 4 {
		t.Fatalf("err %v", err)
	}
	if !strings.HasSuffix(err.Error(), "several_errors_at_once.hcl: 4 error(s)\n") {
		t.Fatalf("report %q", err.Error())
	}
}

func TestRoutesTakeSeveralPoliciesInOrderAndShadowOnes(t *testing.T) {
	src := `
policy "per-second" {
  algorithm = "fixed-window"
  limit     = 10
  window    = "1s"
}
policy "per-day" {
  algorithm = "token-bucket"
  capacity      = 10000
  refill_tokens = 10000
  refill_period = "24h"
}
policy "trial" {
  algorithm = "sliding-counter"
  limit     = 5
  window    = "1m"
  mode      = "shadow"
}
route "tiers" {
  path     = "/tiers"
  upstream = "http://127.0.0.1:9000"
  policies = ["per-second", "per-day", "trial"]
}
route "one" {
  path     = "/one"
  upstream = "http://127.0.0.1:9000"
  policies = ["trial"]
}
route "sugar" {
  path     = "/sugar"
  upstream = "http://127.0.0.1:9000"
  policy   = "trial"
}
`
	f, diags := config.Parse("gateway.hcl", []byte(src), env(nil))
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	tiers, one := f.Proxy.Routes[0], f.Proxy.Routes[1]
	var names []string
	for _, p := range tiers.Policies {
		names = append(names, p.Name)
	}
	if strings.Join(names, ",") != "per-second,per-day,trial" {
		t.Fatalf("policies %v", names)
	}
	if tiers.Policies[0].Shadow || !tiers.Policies[2].Shadow {
		t.Fatal("mode is not carried to the policies")
	}
	if len(one.Policies) != 1 || one.Policies[0].Name != "trial" {
		t.Fatalf("a one-element list is a list of one: %+v", one)
	}
	if sugar := f.Proxy.Routes[2]; !slices.Equal(sugar.Policies, one.Policies) {
		t.Fatalf("policy = \"trial\" is %v, policies = [\"trial\"] %v", sugar.Policies, one.Policies)
	}
}

func TestLegacyRouteOptionsAreCompiledFromTheFile(t *testing.T) {
	src := `
route "orders.read" {
  path           = "/api/v1/orders/"
  upstream       = "http://127.0.0.1:9000"
  rewrite_prefix = "/cgi-bin//orders/"
  host_header    = "orders.internal:8080"
  request_headers {
    set    = { "x-gateway" = "edge", "X-Tenant" = env("TENANT") }
    remove = ["X-Debug"]
  }
  response_headers {
    remove = ["Server"]
  }
}
route "orders.stripped" {
  path           = "/api/v2/orders"
  upstream       = "http://127.0.0.1:9000"
  rewrite_prefix = ""
}
route "orders.plain" {
  path     = "/api/v3/orders"
  upstream = "http://127.0.0.1:9000"
}
`
	f, diags := config.Parse("gateway.hcl", []byte(src), env(map[string]string{"TENANT": "eu-1"}))
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	r := f.Proxy.Routes
	if !r[0].Rewrite || r[0].RewritePrefix != "/cgi-bin/orders" || r[0].HostHeader != "orders.internal:8080" {
		t.Errorf("route 0: rewrite %v %q, host %q", r[0].Rewrite, r[0].RewritePrefix, r[0].HostHeader)
	}
	if got := r[0].RequestHeaders; len(got.Set) != 2 || got.Set[0].Name != "x-gateway" || got.Set[1].Value != "eu-1" || len(got.Remove) != 1 {
		t.Errorf("request rules %+v", got)
	}
	if got := r[0].ResponseHeaders; len(got.Set) != 0 || len(got.Remove) != 1 || got.Remove[0] != "Server" {
		t.Errorf("response rules %+v", got)
	}
	if !r[1].Rewrite || r[1].RewritePrefix != "" {
		t.Errorf("an empty rewrite_prefix does not strip: %v %q", r[1].Rewrite, r[1].RewritePrefix)
	}
	if r[2].Rewrite {
		t.Errorf("a route without rewrite_prefix rewrites")
	}
}

func TestUpgradesAndListenTimeouts(t *testing.T) {
	src := `
listen {
  http                = ":8080"
  tunnel_idle_timeout = "90s"
  body_read_timeout   = "5s"
}
route "chat" {
  path     = "/chat"
  upstream = "http://127.0.0.1:9000"
  upgrade  = ["WebSocket"]
}
route "plain" {
  path     = "/"
  upstream = "http://127.0.0.1:9000"
}
`
	f, diags := config.Parse("gateway.hcl", []byte(src), env(nil))
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	if got := f.Proxy.Routes[0].Upgrades; len(got) != 1 || got[0] != "websocket" {
		t.Errorf("upgrades %q, want [websocket]", got)
	}
	if got := f.Proxy.Routes[1].Upgrades; got != nil {
		t.Errorf("a route without upgrade allows %q", got)
	}
	if f.Proxy.TunnelIdleTimeout != 90*time.Second || f.Proxy.BodyReadTimeout != 5*time.Second {
		t.Errorf("tunnel idle %v, body read %v", f.Proxy.TunnelIdleTimeout, f.Proxy.BodyReadTimeout)
	}
}

func TestAJWTBlockBecomesResolverOptions(t *testing.T) {
	src := `
subject {
  jwt {
    jwks_url   = "https://idp.example/.well-known/jwks.json"
    issuer     = "https://idp.example/"
    audience   = ["orders-api", "orders-admin"]
    claim      = "user_id"
    leeway     = "30s"
    algorithms = ["RS256", "EdDSA"]
    max_token_bytes      = 4096
    invalid_token_policy = "bad-tokens"
  }
}
policy "bad-tokens" {
  algorithm = "fixed-window"
  limit     = 3
  window    = "1h"
}
route "orders.read" {
  path     = "/orders"
  upstream = "http://127.0.0.1:9000"
  subject  = ["jwt", "client_ip"]
}
`
	f, diags := config.Parse("gateway.hcl", []byte(src), env(nil))
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	j := f.Subject.JWT
	if j == nil || j.JWKSURL != "https://idp.example/.well-known/jwks.json" || j.Issuer != "https://idp.example/" ||
		strings.Join(j.Audience, ",") != "orders-api,orders-admin" || j.Claim != "user_id" || j.Leeway.String() != "30s" ||
		strings.Join(j.Algorithms, ",") != "RS256,EdDSA" || j.Keys != nil || j.MaxTokenBytes != 4096 {
		t.Fatalf("jwt options %+v", j)
	}
	if p := f.Proxy.InvalidTokenPolicy; p == nil || p.Name != "bad-tokens" || p.Limit != 3 {
		t.Fatalf("invalid token policy %+v", p)
	}
	if got := f.Proxy.Routes[0].Subject; len(got) != 2 || got[0] != subject.JWT || got[1] != subject.ClientIP {
		t.Fatalf("route sources %v", got)
	}
}

// The per-client connection cap leaves the subject block's trusted proxies
// alone: each carries many clients.
func TestTrustedProxiesAreExemptFromTheClientConnectionCap(t *testing.T) {
	src := `
listen {
  http = ":8080"
}
subject {
  trusted_proxies = ["10.0.0.0/8"]
}
route "plain" {
  path     = "/"
  upstream = "http://127.0.0.1:9000"
}
`
	f, diags := config.Parse("gateway.hcl", []byte(src), env(nil))
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	if got := f.Listen.TrustedProxies; len(got) != 1 || got[0].String() != "10.0.0.0/8" {
		t.Errorf("listen trusted proxies %v, want [10.0.0.0/8]", got)
	}
}

// A line longer than bufio.Scanner's default token is refused for what it
// holds, and the keys after it are still read: none is dropped in silence.
func TestALongLineInTheKeysFileDropsNoKey(t *testing.T) {
	dir := t.TempDir()
	first, last := strings.Repeat("a", 64), strings.Repeat("b", 64)
	keys := first + "\n" + strings.Repeat("c", 70<<10) + "\n" + last + " gold\n"
	if err := os.WriteFile(filepath.Join(dir, "keys.txt"), []byte(keys), 0o600); err != nil {
		t.Fatal(err)
	}
	src := "subject {\n  api_keys_file = \"keys.txt\"\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "gateway.hcl"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := config.Load(filepath.Join(dir, "gateway.hcl"), env(nil))
	var p *config.Problems
	if !errors.As(err, &p) || len(p.Diagnostics) != 1 || !strings.Contains(err.Error(), "line 2 is not a SHA-256") {
		t.Fatalf("want one diagnostic for line 2, got %v", err)
	}

	// Without the long line, both keys are read, the plan with the last.
	keys = first + "\n" + last + " gold\n"
	if err := os.WriteFile(filepath.Join(dir, "keys.txt"), []byte(keys), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := config.Load(filepath.Join(dir, "gateway.hcl"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Subject.KnownKeys) != 2 || len(f.Subject.KeyPlans) != 1 {
		t.Fatalf("keys %d and plans %d, want 2 and 1", len(f.Subject.KnownKeys), len(f.Subject.KeyPlans))
	}
}

// What a response charges by reaches the route's policies as written.
func TestResponseChargedPoliciesReachTheRoute(t *testing.T) {
	src := `
policy "failed-logins" {
  algorithm      = "fixed-window"
  limit          = 5
  window         = "15m"
  count_statuses = [401, 403]
}
policy "usage" {
  algorithm     = "token-bucket"
  capacity      = 100000
  refill_tokens = 1000
  refill_period = "1s"
  cost_header   = "X-Usage-Cost"
  max_cost      = 50000
}
route "login" {
  path     = "/login"
  upstream = "http://127.0.0.1:9000"
  policies = ["failed-logins", "usage"]
}
`
	f, diags := config.Parse("gateway.hcl", []byte(src), env(nil))
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	ps := f.Proxy.Routes[0].Policies
	if len(ps) != 2 || ps[0].CountStatuses != limiter.StatusSet(401, 403) || ps[0].CostHeader != "" ||
		ps[1].CostHeader != "X-Usage-Cost" || ps[1].CountStatuses != (limiter.Statuses{}) || ps[1].MaxCost != 50000 {
		t.Fatalf("policies %+v", ps)
	}
}
