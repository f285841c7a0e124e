package proxy_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/edgegate/gateway/internal/option"
	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
)

// startRLS serves g's rate limit service on a loopback listener and
// returns a client built from Envoy's protos.
func startRLS(t testing.TB, g *gateway) rlsv3.RateLimitServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := proxy.NewRLSServer(g.handler)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// entries is a descriptor of "key=value" entries.
func entries(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for _, e := range kv {
		k, v, _ := strings.Cut(e, "=")
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

func shouldRateLimit(t *testing.T, c rlsv3.RateLimitServiceClient, domain string, hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	res, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return res
}

func rule(name, domain, route string, ps []*limiter.Policy, descriptor ...string) proxy.RLSRule {
	r := proxy.RLSRule{Name: name, Domain: domain, Route: route, Policies: ps}
	for _, e := range descriptor {
		r.Descriptor = append(r.Descriptor, proxy.ParseDescriptorEntry(e))
	}
	return r
}

// mailGateway has a route mail.send, 3 a minute per API key or address,
// and rules that draw on it (api_key with action=send_email) and on a
// budget of their own (client_ip, 2 a minute, with a shadow policy of 1).
func mailGateway(t *testing.T, s setup) *gateway {
	up := newUpstream(t)
	rt := route("mail.send", "/mail", up, t, policy(limitertest.FixedWindow(3, time.Minute), "mail"))
	rt.Subject = []subject.Kind{subject.APIKey, subject.ClientIP}
	shadow := policy(limitertest.FixedWindow(5, time.Minute), "ip-shadow")
	shadow.Shadow = true
	s.routes = []proxy.Route{rt}
	s.rlsRules = append(s.rlsRules,
		rule("send-email", "edge", "mail.send", nil, "api_key", "action=send_email"),
		rule("per-ip", "edge", "", []*limiter.Policy{policy(limitertest.FixedWindow(2, 10*time.Minute), "ip"), shadow}, "client_ip"))
	return newGateway(t, s)
}

func TestRateLimitService(t *testing.T) {
	g := mailGateway(t, setup{})
	c := startRLS(t, g)
	send := entries("api_key=known-key-one", "action=send_email")

	t.Run("OK with the limit, what is left and the headers, then OVER_LIMIT", func(t *testing.T) {
		for i, want := range []uint32{2, 1, 0} {
			res := shouldRateLimit(t, c, "edge", 0, send)
			st := res.Statuses[0]
			if res.OverallCode != rlsv3.RateLimitResponse_OK || st.Code != rlsv3.RateLimitResponse_OK || st.LimitRemaining != want {
				t.Fatalf("call %d: %v, status %v, remaining %d; want OK, %d left", i, res.OverallCode, st.Code, st.LimitRemaining, want)
			}
			l := st.CurrentLimit
			if l.GetRequestsPerUnit() != 3 || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || l.GetName() != "mail" || l.UnitMultiplier != nil {
				t.Errorf("current_limit %v, want mail: 3 per MINUTE", l)
			}
			if d := st.DurationUntilReset.AsDuration(); d <= 0 || d > time.Minute {
				t.Errorf("duration_until_reset %v, want within the minute", d)
			}
			if h := headerValue(res, "RateLimit"); !strings.HasPrefix(h, `"mail";r=`) {
				t.Errorf("RateLimit header %q", h)
			}
		}
		res := shouldRateLimit(t, c, "edge", 0, send)
		if res.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || res.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("fourth call: %v, want OVER_LIMIT", res)
		}
	})
	t.Run("an HTTP request of the same key draws on the same budget", func(t *testing.T) {
		if res := g.get(t, "/mail", "X-API-Key", "known-key-one"); res.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("HTTP after the budget was spent over RLS: %d, want 429", res.StatusCode)
		}
		// The other key's budget: two over HTTP, then hits_addend 2 is
		// over what is left.
		for range 2 {
			if res := g.get(t, "/mail", "X-API-Key", "known-key-two"); res.StatusCode != http.StatusOK {
				t.Fatalf("HTTP: %d", res.StatusCode)
			}
		}
		other := entries("api_key=known-key-two", "action=send_email")
		if res := shouldRateLimit(t, c, "edge", 2, other); res.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("hits_addend 2 with 1 left: %v, want OVER_LIMIT", res.OverallCode)
		}
		if res := shouldRateLimit(t, c, "edge", 1, other); res.OverallCode != rlsv3.RateLimitResponse_OK || res.Statuses[0].LimitRemaining != 0 {
			t.Fatalf("hits_addend 1 with 1 left: %v", res)
		}
	})
	t.Run("a descriptor's hits_addend is its cost", func(t *testing.T) {
		d := entries("client_ip=192.0.2.7")
		d.HitsAddend = wrapperspb.UInt64(2)
		res := shouldRateLimit(t, c, "edge", 1, d)
		if st := res.Statuses[0]; st.Code != rlsv3.RateLimitResponse_OK || st.LimitRemaining != 0 || st.CurrentLimit.GetUnitMultiplier().GetValue() != 10 {
			t.Fatalf("hits_addend 2 of 2: %v", st)
		}
		if res := shouldRateLimit(t, c, "edge", 0, entries("client_ip=192.0.2.7")); res.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("after: %v, want OVER_LIMIT", res.OverallCode)
		}
	})
	t.Run("a descriptor no rule matches is OK with no limit; one over limit makes the call", func(t *testing.T) {
		res := shouldRateLimit(t, c, "edge", 0, entries("action=send_email"), entries("api_key=known-key-one", "action=send_sms"),
			entries("api_key=known-key-one", "action=send_email"))
		want := []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT}
		for i, st := range res.Statuses {
			if st.Code != want[i] || i < 2 && st.CurrentLimit != nil {
				t.Errorf("descriptor %d: %v, want %v", i, st, want[i])
			}
		}
		if res.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("overall %v", res.OverallCode)
		}
	})
	t.Run("an unknown API key earns no budget", func(t *testing.T) {
		res := shouldRateLimit(t, c, "edge", 0, entries("api_key=made-up-key", "action=send_email"))
		if res.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("unknown key: %v, want OVER_LIMIT", res.OverallCode)
		}
	})
	// Envoy fills entries and hits_addend from the request, and lets a
	// call that fails through unless failure_mode_deny is set: what a
	// client sets is decided, never refused.
	long := "path=/v1/mail/" + strings.Repeat("a", 300)
	t.Run("a long entry no rule reads is ignored", func(t *testing.T) {
		if res := shouldRateLimit(t, c, "edge", 0, entries("api_key=known-key-one", "action=send_email", long)); res.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("a spent key: %v, want OVER_LIMIT", res.OverallCode)
		}
		if res := shouldRateLimit(t, c, "edge", 0, entries("client_ip=192.0.2.11", long)); res.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Errorf("an address with its budget: %v, want OK", res.OverallCode)
		}
	})
	t.Run("a subject over 256 bytes is OVER_LIMIT", func(t *testing.T) {
		if res := shouldRateLimit(t, c, "edge", 0, entries("api_key="+strings.Repeat("k", 300), "action=send_email")); res.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("%v, want OVER_LIMIT", res.OverallCode)
		}
	})
	t.Run("a cost over max_cost is OVER_LIMIT and charges nothing", func(t *testing.T) {
		huge := entries("client_ip=192.0.2.10")
		huge.HitsAddend = wrapperspb.UInt64(1 << 63)
		if res := shouldRateLimit(t, c, "edge", 1<<20, entries("client_ip=192.0.2.10")); res.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("hits_addend 2^20: %v, want OVER_LIMIT", res.OverallCode)
		}
		if res := shouldRateLimit(t, c, "edge", 0, huge); res.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("a descriptor's hits_addend of 2^63: %v, want OVER_LIMIT", res.OverallCode)
		}
		if st := shouldRateLimit(t, c, "edge", 0, entries("client_ip=192.0.2.10")).Statuses[0]; st.Code != rlsv3.RateLimitResponse_OK || st.LimitRemaining != 1 {
			t.Errorf("after: %v, want OK with 1 of 2 left", st)
		}
	})
	t.Run("bad requests get gRPC errors", func(t *testing.T) {
		negative := entries("client_ip=192.0.2.8")
		negative.IsNegativeHits = true
		var many []*ratelimitv3.RateLimitDescriptor
		for range 65 {
			many = append(many, entries("client_ip=192.0.2.9"))
		}
		for _, c2 := range []struct {
			name string
			req  *rlsv3.RateLimitRequest
			code codes.Code
		}{
			{"no domain", &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{send}}, codes.InvalidArgument},
			{"no descriptors", &rlsv3.RateLimitRequest{Domain: "edge"}, codes.InvalidArgument},
			{"an empty descriptor", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{}}}, codes.InvalidArgument},
			{"an unknown domain", &rlsv3.RateLimitRequest{Domain: "nope", Descriptors: []*ratelimitv3.RateLimitDescriptor{send}}, codes.NotFound},
			{"a huge key", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{entries(strings.Repeat("k", 300) + "=v")}}, codes.InvalidArgument},
			{"negative hits", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{negative}}, codes.InvalidArgument},
			{"too many descriptors", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: many}, codes.InvalidArgument},
		} {
			_, err := c.ShouldRateLimit(context.Background(), c2.req)
			if status.Code(err) != c2.code {
				t.Errorf("%s: %v, want %v", c2.name, err, c2.code)
			}
		}
	})
}

func headerValue(res *rlsv3.RateLimitResponse, name string) string {
	for _, h := range res.ResponseHeadersToAdd {
		if h.Key == name {
			return h.Value
		}
	}
	return ""
}

func TestRateLimitServiceToken(t *testing.T) {
	const token = "a-fake-rls-token-for-tests"
	c := startRLS(t, mailGateway(t, setup{rlsToken: token}))
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{entries("client_ip=192.0.2.1")}}
	for _, auth := range []string{"", "Bearer wrong-token-of-some-length", "Basic " + token} {
		ctx := context.Background()
		if auth != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", auth)
		}
		if _, err := c.ShouldRateLimit(ctx, req); status.Code(err) != codes.Unauthenticated {
			t.Errorf("authorization %q: %v, want Unauthenticated", auth, err)
		}
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	if res, err := c.ShouldRateLimit(ctx, req); err != nil || res.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("with the token: %v, %v", res, err)
	}
}

// TestRateLimitServiceSharesThePenaltyBox: the penalty box is the
// route's, whichever way a subject asks.
func TestRateLimitServiceSharesThePenaltyBox(t *testing.T) {
	p := policy(limitertest.FixedWindow(2, time.Minute), "mail")
	p.Penalty = time.Hour
	rt := route("mail.send", "/mail", newUpstream(t), t, p)
	rt.Subject = []subject.Kind{subject.APIKey}
	g := newGateway(t, setup{routes: []proxy.Route{rt},
		rlsRules: []proxy.RLSRule{rule("send-email", "edge", "mail.send", nil, "api_key", "action=send_email")}})
	c := startRLS(t, g)

	t.Run("a subject penalized over HTTP is OVER_LIMIT for the penalty left", func(t *testing.T) {
		wantStatuses(t, statuses(t, g, "/mail", 2, "X-API-Key", "known-key-one"), 200, 200)
		if res := g.get(t, "/mail", "X-API-Key", "known-key-one"); !penalized(t, res, time.Hour) {
			t.Fatalf("going over on HTTP: %d, want the penalty", res.StatusCode)
		}
		g.clock.Advance(time.Minute) // the window refills; the penalty holds
		res := shouldRateLimit(t, c, "edge", 0, entries("api_key=known-key-one", "action=send_email"))
		if st := res.Statuses[0]; st.Code != rlsv3.RateLimitResponse_OVER_LIMIT || st.DurationUntilReset.AsDuration() <= 59*time.Minute || st.DurationUntilReset.AsDuration() > time.Hour {
			t.Fatalf("the penalized key: %v, want OVER_LIMIT until the penalty ends", st)
		}
	})
	t.Run("going over a policy with a penalty puts the subject in the box", func(t *testing.T) {
		d := entries("api_key=known-key-two", "action=send_email")
		for range 2 {
			shouldRateLimit(t, c, "edge", 0, d)
		}
		res := shouldRateLimit(t, c, "edge", 0, d)
		if st := res.Statuses[0]; st.Code != rlsv3.RateLimitResponse_OVER_LIMIT || st.DurationUntilReset.AsDuration() != time.Hour {
			t.Fatalf("going over: %v, want OVER_LIMIT for the penalty", st)
		}
		g.clock.Advance(time.Minute)
		if res := g.get(t, "/mail", "X-API-Key", "known-key-two"); !penalized(t, res, time.Hour) {
			t.Fatalf("HTTP after the window: %d, want the penalty", res.StatusCode)
		}
	})
}

// TestRateLimitServicePlans: a principal's plan is the descriptor's plan
// entry when the rule names one, as a trusted proxy's plan header is on
// HTTP.
func TestRateLimitServicePlans(t *testing.T) {
	up := newUpstream(t)
	gold := map[string][]*limiter.Policy{"gold": {policy(limitertest.FixedWindow(2, time.Minute), "gold")}}
	plansOnly := route("mail.send", "/mail", up, t, nil)
	plansOnly.Plans, plansOnly.Subject = gold, []subject.Kind{subject.Principal}
	withDefault := route("orders", "/orders", up, t, policy(limitertest.FixedWindow(4, time.Minute), "free"))
	withDefault.Plans, withDefault.Subject = gold, []subject.Kind{subject.Principal}
	g := newGateway(t, setup{routes: []proxy.Route{plansOnly, withDefault}, trusted: []string{"127.0.0.1/32"},
		rlsRules: []proxy.RLSRule{
			rule("send-email", "mail", "mail.send", nil, "principal", "plan"),
			rule("send-email-any-plan", "mail", "mail.send", nil, "principal"),
			rule("orders", "orders", "orders", nil, "principal", "plan"),
			rule("orders-by-principal", "orders-by-principal", "orders", nil, "principal"),
		}})
	c := startRLS(t, g)

	t.Run("a plan entry draws on the plan's budget that HTTP spends", func(t *testing.T) {
		wantStatuses(t, statuses(t, g, "/mail", 2, "X-Auth-Principal", "alice", "X-Auth-Plan", "gold"), 200, 200)
		res := shouldRateLimit(t, c, "mail", 0, entries("principal=alice", "plan=gold"))
		if st := res.Statuses[0]; st.Code != rlsv3.RateLimitResponse_OVER_LIMIT || st.CurrentLimit.GetName() != "gold" {
			t.Fatalf("alice on gold, whose budget HTTP spent: %v, want OVER_LIMIT of gold", st)
		}
	})
	t.Run("a plan entry the rule does not name is ignored: whatever it says, one budget", func(t *testing.T) {
		for i, plan := range []string{"plan=gold", "plan=bronze", "", "plan=gold"} {
			d := entries("principal=dave")
			if plan != "" {
				d = entries("principal=dave", plan)
			}
			st := shouldRateLimit(t, c, "orders-by-principal", 0, d).Statuses[0]
			if want := uint32(3 - i); st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit.GetName() != "free" || st.LimitRemaining != want {
				t.Fatalf("call %d, %q: %v, want OK of free with %d left", i, plan, st, want)
			}
		}
		if res := shouldRateLimit(t, c, "orders-by-principal", 0, entries("principal=dave", "plan=gold")); res.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("dave with free spent, naming gold: %v, want OVER_LIMIT", res.OverallCode)
		}
	})
	t.Run("a descriptor with two plan or two subject entries is OVER_LIMIT and charges nothing", func(t *testing.T) {
		for _, d := range []*ratelimitv3.RateLimitDescriptor{
			entries("principal=erin", "plan=gold", "plan=gold"),
			entries("principal=erin", "plan=bronze", "plan=gold"),
			entries("plan=gold", "principal=erin", "plan=gold"),
			entries("principal=erin", "principal=mallory", "plan=gold"),
			entries("principal=mallory", "principal=erin", "plan=gold"),
		} {
			if res := shouldRateLimit(t, c, "mail", 0, d); res.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Errorf("%v: %v, want OVER_LIMIT", d.Entries, res.OverallCode)
			}
		}
		if st := shouldRateLimit(t, c, "mail", 0, entries("principal=erin", "plan=gold")).Statuses[0]; st.Code != rlsv3.RateLimitResponse_OK || st.LimitRemaining != 1 {
			t.Fatalf("after: %v, want OK with 1 of gold's 2 left", st)
		}
	})
	t.Run("a plan entry's value is trimmed as a plan header's is", func(t *testing.T) {
		for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
			if res := shouldRateLimit(t, c, "mail", 0, entries("principal=frank", "plan= gold ")); res.OverallCode != want {
				t.Fatalf("call %d naming \" gold \": %v, want %v (gold's 2)", i, res.OverallCode, want)
			}
		}
	})
	t.Run("on a route only plans limit, a rule with a plan entry passes a subject on none of them, as HTTP does", func(t *testing.T) {
		wantStatuses(t, statuses(t, g, "/mail", 3, "X-Auth-Principal", "bob", "X-Auth-Plan", "bronze"), 200, 200, 200)
		for _, d := range []*ratelimitv3.RateLimitDescriptor{entries("principal=bob", "plan=bronze"), entries("principal=bob", "plan=bronze"), entries("principal=bob", "plan=bronze"), entries("principal=bob", "plan=")} {
			if st := shouldRateLimit(t, c, "mail", 0, d).Statuses[0]; st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit != nil {
				t.Errorf("%v: %v, want OK with no limit", d.Entries, st)
			}
		}
	})
	t.Run("on a route only plans limit, a rule without a plan entry is OVER_LIMIT: it cannot tell a subject on no plan", func(t *testing.T) {
		wantStatuses(t, statuses(t, g, "/mail", 1, "X-Auth-Principal", "frank"), 200)
		if res := shouldRateLimit(t, c, "mail", 0, entries("principal=frank")); res.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("frank with no plan entry: %v, want OVER_LIMIT", res.OverallCode)
		}
	})
	t.Run("a plan the route does not map draws on the default budget, as on HTTP", func(t *testing.T) {
		wantStatuses(t, statuses(t, g, "/orders", 1, "X-Auth-Principal", "carol", "X-Auth-Plan", "bronze"), 200)
		for _, plan := range []string{"plan=bronze", "plan=partner", "plan=" + strings.Repeat("p", 300)} {
			res := shouldRateLimit(t, c, "orders", 0, entries("principal=carol", plan))
			if st := res.Statuses[0]; st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit.GetName() != "free" {
				t.Fatalf("carol with %.20s: %v, want OK of free", plan, st)
			}
		}
		if res := g.get(t, "/orders", "X-Auth-Principal", "carol"); res.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("HTTP for carol after 1 + 3 of the free budget of 4: %d, want 429", res.StatusCode)
		}
	})
}

// TestRateLimitServiceAsEnvoysRatelimitDoes ports the cases of
// envoyproxy/ratelimit's own service tests that apply: the most specific
// rule wins (a key with its value over the key alone), a shadow policy
// answers OK however far over it is, and several descriptors are decided
// each on its own.
func TestRateLimitServiceAsEnvoysRatelimitDoes(t *testing.T) {
	up := newUpstream(t)
	rt := route("api", "/", up, t, nil)
	rt.Subject = []subject.Kind{subject.ClientIP}
	shadow := policy(limitertest.FixedWindow(1, time.Hour), "shadowed")
	shadow.Shadow = true
	g := newGateway(t, setup{routes: []proxy.Route{rt}, rlsRules: []proxy.RLSRule{
		rule("any-key", "basic", "", []*limiter.Policy{policy(limitertest.FixedWindow(50, time.Second), "any")}, "client_ip", "key1"),
		rule("key1-value1", "basic", "", []*limiter.Policy{policy(limitertest.FixedWindow(2, time.Second), "value1")}, "client_ip", "key1=value1"),
		rule("shadow", "basic", "", []*limiter.Policy{shadow}, "client_ip", "shadow"),
		rule("per-day", "another", "", []*limiter.Policy{policy(limitertest.FixedWindow(100, 24*time.Hour), "day")}, "client_ip"),
	}})
	c := startRLS(t, g)

	res := shouldRateLimit(t, c, "basic", 0, entries("client_ip=192.0.2.1", "key1=value1"))
	if st := res.Statuses[0]; st.CurrentLimit.GetName() != "value1" || st.LimitRemaining != 1 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND {
		t.Errorf("key1=value1: %v, want the value1 rule, 1 left of 2 per SECOND", st)
	}
	res = shouldRateLimit(t, c, "basic", 0, entries("client_ip=192.0.2.1", "key1=value2"))
	if st := res.Statuses[0]; st.CurrentLimit.GetName() != "any" || st.LimitRemaining != 49 {
		t.Errorf("key1=value2: %v, want the key1 rule, 49 left of 50", st)
	}
	for range 3 {
		res = shouldRateLimit(t, c, "basic", 0, entries("client_ip=192.0.2.1", "shadow=x"))
		if res.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("shadow: %v, want OK", res.OverallCode)
		}
	}
	res = shouldRateLimit(t, c, "another", 0, entries("client_ip=192.0.2.1"), entries("client_ip=192.0.2.2"))
	for i, st := range res.Statuses {
		if st.LimitRemaining != 99 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_DAY {
			t.Errorf("descriptor %d: %v, want 99 left of 100 per DAY", i, st)
		}
	}
}

func TestRLSRulesValidate(t *testing.T) {
	fw := policy(limitertest.FixedWindow(1, time.Second), "fw")
	conc := policy(limitertest.Concurrency(1, time.Minute), "conc")
	penalty := policy(limitertest.FixedWindow(1, time.Second), "penalty")
	penalty.Penalty = time.Minute
	routes := []proxy.Route{
		{OperationID: "r", Subject: []subject.Kind{subject.ClientIP}, Policies: []*limiter.Policy{fw}},
		{OperationID: "unplanned", Subject: []subject.Kind{subject.Principal}, Policies: []*limiter.Policy{fw}},
		{OperationID: "planned", Subject: []subject.Kind{subject.Principal, subject.ClientIP}, Plans: map[string][]*limiter.Policy{"gold": {fw}}},
	}
	cases := []struct {
		name  string
		rules []proxy.RLSRule
		field string
	}{
		{"no subject entry", []proxy.RLSRule{rule("a", "d", "r", nil, "key")}, "rls_rules[0].descriptor"},
		{"no domain", []proxy.RLSRule{rule("a", "", "r", nil, "client_ip")}, "rls_rules[0].domain"},
		{"an unknown route", []proxy.RLSRule{rule("a", "d", "nope", nil, "client_ip")}, "rls_rules[0].route"},
		{"a subject the route does not know", []proxy.RLSRule{rule("a", "d", "r", nil, "api_key")}, "rls_rules[0].descriptor"},
		{"route and policies", []proxy.RLSRule{rule("a", "d", "r", []*limiter.Policy{fw}, "client_ip")}, "rls_rules[0]"},
		{"neither", []proxy.RLSRule{rule("a", "d", "", nil, "client_ip")}, "rls_rules[0]"},
		{"a concurrency policy", []proxy.RLSRule{rule("a", "d", "", []*limiter.Policy{conc}, "client_ip")}, "rls_rules[0].policies"},
		{"a repeated policy", []proxy.RLSRule{rule("a", "d", "", []*limiter.Policy{fw, fw}, "client_ip")}, "rls_rules[0].policies[1]"},
		{"a policy with a penalty of its own", []proxy.RLSRule{rule("a", "d", "", []*limiter.Policy{penalty}, "client_ip")}, "rls_rules[0].policies"},
		{"an entry with no key", []proxy.RLSRule{rule("a", "d", "r", nil, "client_ip", "=v")}, "rls_rules[0].descriptor[1]"},
		{"the same descriptor twice", []proxy.RLSRule{rule("a", "d", "r", nil, "client_ip"), rule("b", "d", "r", nil, "client_ip")}, "rls_rules[1].descriptor"},
		{"a plan entry on a route that maps no plans", []proxy.RLSRule{rule("a", "d", "unplanned", nil, "principal", "plan")}, "rls_rules[0].descriptor[1]"},
		{"a plan entry with a budget of the rule's own", []proxy.RLSRule{rule("a", "d", "", []*limiter.Policy{fw}, "principal", "plan")}, "rls_rules[0].descriptor[1]"},
		{"a plan entry for a subject whose plan is not the request's", []proxy.RLSRule{rule("a", "d", "planned", nil, "client_ip", "plan")}, "rls_rules[0].descriptor[1]"},
		{"two plan entries", []proxy.RLSRule{rule("a", "d", "planned", nil, "principal", "plan", "plan")}, "rls_rules[0].descriptor[2]"},
		{"a plan entry naming a plan the route does not map", []proxy.RLSRule{rule("a", "d", "planned", nil, "principal", "plan=silver")}, "rls_rules[0].descriptor[1]"},
	}
	for _, c := range cases {
		err := proxy.ValidateRLSRules(c.rules, routes)
		var oe *option.Error
		if !errors.As(err, &oe) || oe.Field != c.field {
			t.Errorf("%s: %v (field %v), want a problem of %s", c.name, err, oe, c.field)
		}
	}
	if err := proxy.ValidateRLSRules([]proxy.RLSRule{rule("a", "d", "r", nil, "client_ip"), rule("b", "d", "", []*limiter.Policy{fw}, "client_ip", "k=v"),
		rule("c", "d", "planned", nil, "principal", "plan"), rule("e", "d", "planned", nil, "plan=gold", "principal")}, routes); err != nil {
		t.Errorf("sound rules: %v", err)
	}
}

// TestRLSCallersGivingUpDoNotOpenTheBreaker: callers whose deadlines pass
// while Redis is slow have given up; that says nothing of Redis, and the
// next caller is decided, not refused by an open breaker.
func TestRLSCallersGivingUpDoNotOpenTheBreaker(t *testing.T) {
	s := redistest.Start(t)
	up := newUpstream(t)
	rt := route("api", "/", up, t, redisPolicy(limitertest.FixedWindow(1000, time.Minute), "impatient-"+limitertest.Subject()[3:11]))
	rt.Subject = []subject.Kind{subject.ClientIP}
	g := newGateway(t, setup{routes: []proxy.Route{rt}, limiter: redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}}),
		rlsRules: []proxy.RLSRule{rule("api", "edge", "api", nil, "client_ip")}})
	c := startRLS(t, g)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{entries("client_ip=192.0.2.1")}}
	shouldRateLimit(t, c, "edge", 0, req.Descriptors...)

	s.Stop()
	var wg sync.WaitGroup
	for range 2 * limiter.DefaultBreakerFailures {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			if _, err := c.ShouldRateLimit(ctx, req); status.Code(err) != codes.DeadlineExceeded {
				t.Errorf("a call to a stopped Redis: %v, want DeadlineExceeded", err)
			}
		})
	}
	wg.Wait()
	s.Cont()
	if res := shouldRateLimit(t, c, "edge", 0, req.Descriptors...); res.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("after Redis answered again: %v, want OK", res.OverallCode)
	}
}
