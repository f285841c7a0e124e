package proxy_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
	"github.com/edgegate/gateway/subject/jwttest"
)

// planRoute is a route whose subjects without a plan get "free" (2 a
// minute), gold ones "gold" (5), and partner ones two policies at once.
func planRoute(t *testing.T, up *upstream, sources ...subject.Kind) proxy.Route {
	r := route("orders.read", "/orders", up, t, policy(limitertest.FixedWindow(2, time.Minute), "free"))
	r.Subject = sources
	r.Plans = map[string][]*limiter.Policy{
		"gold": {policy(limitertest.FixedWindow(5, time.Minute), "gold")},
		"partner": {
			policy(limitertest.FixedWindow(3, time.Minute), "per-minute"),
			policy(limitertest.FixedWindow(100, time.Hour), "per-hour"),
		},
	}
	return r
}

func TestAKeysPlanPicksItsPolicy(t *testing.T) {
	up := newUpstream(t)
	g := newGateway(t, setup{routes: []proxy.Route{planRoute(t, up, subject.APIKey)}})
	gold := statuses(t, g, "/orders", 6, "X-API-Key", "known-gold-key")
	plain := statuses(t, g, "/orders", 3, "X-API-Key", "known-key-one")
	wantStatuses(t, gold, 200, 200, 200, 200, 200, 429)
	wantStatuses(t, plain, 200, 200, 429)
	if got := g.get(t, "/orders", "X-API-Key", "known-gold-key").Header.Get("RateLimit-Policy"); got != `"gold";q=5;w=60` {
		t.Errorf("gold RateLimit-Policy %q", got)
	}
	plans := map[string]int{}
	for _, rec := range accessRecords(t, g) {
		p, _ := rec["plan"].(string)
		plans[p]++
	}
	if plans["gold"] == 0 || plans[""] == 0 {
		t.Fatalf("access log plans %v, want gold and none", plans)
	}
}

func TestAPlanHeaderCountsFromATrustedProxyOnly(t *testing.T) {
	t.Run("from a trusted proxy the principal's plan picks its policy", func(t *testing.T) {
		up := newUpstream(t)
		g := newGateway(t, setup{routes: []proxy.Route{planRoute(t, up, subject.Principal, subject.ClientIP)}, trusted: []string{"127.0.0.0/8"}})
		wantStatuses(t, statuses(t, g, "/orders", 6, "X-Auth-Principal", "alice", "X-Auth-Plan", "gold"), 200, 200, 200, 200, 200, 429)
		// The trusted proxy's plan header reaches the upstream.
		if got := up.last().Header.Get("X-Auth-Plan"); got != "gold" {
			t.Errorf("the upstream got plan %q, want gold", got)
		}
		wantStatuses(t, statuses(t, g, "/orders", 3, "X-Auth-Principal", "bob"), 200, 200, 429)
	})
	t.Run("from anyone else it is ignored and dropped", func(t *testing.T) {
		up := newUpstream(t)
		g := newGateway(t, setup{routes: []proxy.Route{planRoute(t, up, subject.Principal, subject.ClientIP)}})
		wantStatuses(t, statuses(t, g, "/orders", 3, "X-Auth-Principal", "alice", "X-Auth-Plan", "gold"), 200, 200, 429)
		if got := up.last().Header.Get("X-Auth-Plan"); got != "" {
			t.Errorf("the upstream got the untrusted plan header %q", got)
		}
		for _, rec := range accessRecords(t, g) {
			if rec["plan"] != nil {
				t.Fatalf("an untrusted plan was logged: %v", rec)
			}
		}
	})
	t.Run("a plan the configuration does not know is no plan, logged as other", func(t *testing.T) {
		up := newUpstream(t)
		g := newGateway(t, setup{routes: []proxy.Route{planRoute(t, up, subject.Principal, subject.ClientIP)}, trusted: []string{"127.0.0.0/8"}})
		wantStatuses(t, statuses(t, g, "/orders", 3, "X-Auth-Principal", "carol", "X-Auth-Plan", "platinum-9000"), 200, 200, 429)
		recs := accessRecords(t, g)
		if len(recs) == 0 || recs[0]["plan"] != "other" {
			t.Fatalf("plan logged as %v, want other", recs)
		}
	})
	t.Run("a plan header sent twice is ambiguous", func(t *testing.T) {
		up := newUpstream(t)
		g := newGateway(t, setup{routes: []proxy.Route{planRoute(t, up, subject.Principal, subject.ClientIP)}, trusted: []string{"127.0.0.0/8"}})
		if s := g.get(t, "/orders", "X-Auth-Principal", "dave", "X-Auth-Plan", "gold", "X-Auth-Plan", "partner").StatusCode; s != 400 {
			t.Fatalf("status %d, want 400", s)
		}
	})
}

func TestAChangedPlanStartsItsOwnBudget(t *testing.T) {
	up := newUpstream(t)
	r := planRoute(t, up, subject.Principal, subject.ClientIP)
	// Both plans on one policy: only the plan tells the budgets apart.
	r.Plans = map[string][]*limiter.Policy{"gold": r.Policies, "partner": r.Policies}
	g := newGateway(t, setup{routes: []proxy.Route{r}, trusted: []string{"127.0.0.0/8"}})
	wantStatuses(t, statuses(t, g, "/orders", 3, "X-Auth-Principal", "erin", "X-Auth-Plan", "gold"), 200, 200, 429)
	wantStatuses(t, statuses(t, g, "/orders", 3, "X-Auth-Principal", "erin", "X-Auth-Plan", "partner"), 200, 200, 429)
	wantStatuses(t, statuses(t, g, "/orders", 1, "X-Auth-Principal", "erin", "X-Auth-Plan", "gold"), 429)
}

func TestAPlanWithSeveralPoliciesDecidesThemTogether(t *testing.T) {
	up := newUpstream(t)
	g := newGateway(t, setup{routes: []proxy.Route{planRoute(t, up, subject.Principal)}, trusted: []string{"127.0.0.0/8"}})
	res := g.get(t, "/orders", "X-Auth-Principal", "frank", "X-Auth-Plan", "partner")
	if got := res.Header.Get("RateLimit-Policy"); got != `"per-minute";q=3;w=60, "per-hour";q=100;w=3600` {
		t.Fatalf("RateLimit-Policy %q", got)
	}
	wantStatuses(t, statuses(t, g, "/orders", 3, "X-Auth-Principal", "frank", "X-Auth-Plan", "partner"), 200, 200, 429)
}

func TestARouteLimitedOnlyByPlansLetsOtherSubjectsThrough(t *testing.T) {
	up := newUpstream(t)
	r := planRoute(t, up, subject.APIKey, subject.ClientIP)
	r.Policies = nil
	g := newGateway(t, setup{routes: []proxy.Route{r}})
	wantStatuses(t, statuses(t, g, "/orders", 4, "X-API-Key", "known-key-one"), 200, 200, 200, 200)
	wantStatuses(t, statuses(t, g, "/orders", 6, "X-API-Key", "known-gold-key"), 200, 200, 200, 200, 200, 429)
}

func accessRecords(t *testing.T, g *gateway) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for line := range strings.SplitSeq(g.logs.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "request" {
			continue
		}
		recs = append(recs, rec)
	}
	return recs
}

func TestAJWTPlanClaimPicksThePolicy(t *testing.T) {
	up := newUpstream(t)
	k := jwttest.RSA(t, "r1")
	keys, err := subject.ParseKeySet(jwttest.JWKS(k))
	if err != nil {
		t.Fatal(err)
	}
	resolver, err := subject.NewResolver(subject.Options{
		PseudonymKeys:    map[int][]byte{1: []byte(fakeSecret)},
		PseudonymVersion: 1,
		Plans:            []string{"gold", "partner"},
		JWT: &subject.JWTOptions{
			Keys:       keys,
			Issuer:     "https://idp.test/",
			Audience:   []string{"orders-api"},
			Algorithms: []string{"RS256"},
			PlanClaim:  "plan",
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	g := newGateway(t, setup{routes: []proxy.Route{planRoute(t, up, subject.JWT, subject.ClientIP)}, resolver: resolver})
	token := func(sub string, plan any) string {
		c := jwttest.Claims(sub, time.Now().Add(time.Hour))
		if plan != nil {
			c["plan"] = plan
		}
		return "Bearer " + k.Sign(t, c)
	}
	wantStatuses(t, statuses(t, g, "/orders", 6, "Authorization", token("alice", "gold")), 200, 200, 200, 200, 200, 429)
	wantStatuses(t, statuses(t, g, "/orders", 3, "Authorization", token("bob", nil)), 200, 200, 429)
	wantStatuses(t, statuses(t, g, "/orders", 3, "Authorization", token("carol", "platinum")), 200, 200, 429)
	wantStatuses(t, statuses(t, g, "/orders", 3, "Authorization", token("dave", 42)), 200, 200, 429)
	// The same principal on another plan has a budget of its own.
	wantStatuses(t, statuses(t, g, "/orders", 1, "Authorization", token("bob", "gold")), 200)
	plans := map[any]int{}
	for _, rec := range accessRecords(t, g) {
		plans[rec["plan"]]++
	}
	if plans["gold"] != 7 || plans["other"] != 3 || plans[nil] != 6 {
		t.Fatalf("plans logged %v", plans)
	}
}

// A plan earns budgets of its own only on a route that maps it: on
// another route the subject has the default budget whether it states a
// plan or not, so no plan some other route maps buys a second one.
func TestAPlanOnlyAnotherRouteMapsEarnsNoBudgetOfItsOwn(t *testing.T) {
	up := newUpstream(t)
	plain := route("orders.list", "/list", up, t, policy(limitertest.FixedWindow(2, time.Minute), "two"))
	plain.Subject = []subject.Kind{subject.Principal, subject.APIKey, subject.ClientIP}
	g := newGateway(t, setup{
		routes:  []proxy.Route{planRoute(t, up, subject.Principal, subject.APIKey, subject.ClientIP), plain},
		trusted: []string{"127.0.0.0/8"},
	})
	wantStatuses(t, statuses(t, g, "/list", 2, "X-Auth-Principal", "alice", "X-Auth-Plan", "gold"), 200, 200)
	wantStatuses(t, statuses(t, g, "/list", 1, "X-Auth-Principal", "alice"), 429)
	wantStatuses(t, statuses(t, g, "/list", 1, "X-Auth-Principal", "alice", "X-Auth-Plan", "partner"), 429)
	// Where the plan is mapped it still picks its own budget.
	wantStatuses(t, statuses(t, g, "/orders", 6, "X-Auth-Principal", "alice", "X-Auth-Plan", "gold"), 200, 200, 200, 200, 200, 429)
	wantStatuses(t, statuses(t, g, "/orders", 3, "X-Auth-Principal", "alice"), 200, 200, 429)
}
