package proxy_test

import (
	"errors"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/proxy"
)

// A route's rules are the proxy's: each problem names the field it is
// about, so that configuration can point at it, and NewHandler refuses
// the same route for the same reasons.
func TestRouteValidateNamesTheFieldOfEachProblem(t *testing.T) {
	r := proxy.Route{
		OperationID: "r", Path: "/", Rewrite: true, RewritePrefix: "no-slash", HostHeader: "a/b",
		RequestHeaders: proxy.HeaderRules{
			Set:    []proxy.Header{{Name: "X-A", Value: "1"}, {Name: "x-a", Value: "bad\n"}},
			Remove: []string{"X-Forwarded-For"},
		},
		ResponseHeaders: proxy.HeaderRules{Remove: []string{"bad name"}},
		Upgrades:        []string{"websocket", "h2c", "WebSocket"},
	}
	fields, earlier := problemFields(t, r.Validate(nil))
	want := []string{"rewrite_prefix", "host_header", "request_headers.set[1]", "request_headers.set[1].value",
		"request_headers.remove[0]", "response_headers.remove[0]", "upgrade[1]", "upgrade[2]"}
	if !slices.Equal(fields, want) {
		t.Errorf("fields %q, want %q", fields, want)
	}
	if earlier != "request_headers.set[0]" {
		t.Errorf("the duplicate names %q as the earlier one", earlier)
	}
	ok := proxy.Route{OperationID: "ok", Path: "/a//b/", RewritePrefix: "/a//b/", Rewrite: true, Upgrades: []string{"WebSocket"}}
	if err := ok.Validate(nil); err != nil {
		t.Errorf("a path, a rewrite prefix and an upgrade in any accepted form: %v", err)
	}
}

// A policy counts once per route and once per plan, and a plan names at
// least one: the problems are named by the list and the position in it.
func TestRouteValidateNamesRepeatedPoliciesAndEmptyPlans(t *testing.T) {
	a := &limiter.Policy{Name: "a", Algorithm: limiter.FixedWindow, Revision: 1, Limit: 5, Window: time.Second, MaxCost: 1}
	b := &limiter.Policy{Name: "b", Algorithm: limiter.FixedWindow, Revision: 1, Limit: 5, Window: time.Minute, MaxCost: 1}
	up, _ := proxy.ParseTarget("http://127.0.0.1:9")
	r := proxy.Route{OperationID: "r", Path: "/", Upstream: up, Policies: []*limiter.Policy{a, b, a},
		Plans: map[string][]*limiter.Policy{"gold": {b, b}, "free": {}, "silver": {a, b}}}
	fields, _ := problemFields(t, r.Validate(nil))
	want := []string{"policies[2]", "plans.free", "plans.gold[1]"}
	if !slices.Equal(fields, want) {
		t.Errorf("fields %q, want %q", fields, want)
	}
	if _, err := proxy.NewHandler(proxy.Options{}, proxy.Config{Routes: []proxy.Route{r}, Limiter: limiter.NewMemory(limiter.MemoryOptions{}), Resolver: newResolver(t, nil)}); err == nil {
		t.Error("NewHandler took a route that Validate refuses")
	}
}

// A route's path is one RoutePath takes, and its cost within the max_cost
// of each of its policies and its plans': the first that allows less is
// named, once.
func TestRouteValidateNamesThePathAndACostAboveMaxCost(t *testing.T) {
	small := &limiter.Policy{Name: "small", Algorithm: limiter.FixedWindow, Revision: 1, Limit: 10, Window: time.Minute, MaxCost: 2}
	smaller := &limiter.Policy{Name: "smaller", Algorithm: limiter.FixedWindow, Revision: 1, Limit: 10, Window: time.Minute, MaxCost: 1}
	large := &limiter.Policy{Name: "large", Algorithm: limiter.FixedWindow, Revision: 1, Limit: 100, Window: time.Minute, MaxCost: 50}
	for _, path := range []string{"", "orders", "/a%2Fb", "/a;b", "/orders."} {
		r := proxy.Route{OperationID: "r", Path: path}
		if fields, _ := problemFields(t, r.Validate(nil)); !slices.Equal(fields, []string{"path"}) {
			t.Errorf("path %q: fields %q", path, fields)
		}
	}
	r := proxy.Route{OperationID: "r", Path: "/", Cost: 3, Policies: []*limiter.Policy{large},
		Plans: map[string][]*limiter.Policy{"gold": {small, smaller}, "silver": {smaller}}}
	var fe *proxy.FieldError
	if err := r.Validate(nil); !errors.As(err, &fe) || fe.Field != "cost" || fe.Detail != `cost is 3 but policy "small" allows at most 2.` {
		t.Errorf("cost above a plan's max_cost: %v", err)
	}
	if p, err := proxy.RoutePath("/a//b/../c/"); p != "/a/c" || err != nil {
		t.Errorf("RoutePath: %q, %v", p, err)
	}
	r.Cost = 2
	r.Plans = map[string][]*limiter.Policy{"gold": {small}}
	if err := r.Validate(nil); err != nil {
		t.Errorf("cost at max_cost: %v", err)
	}
}

// Routes as a list are the proxy's too: a label taken twice is reported
// for that alone, and two routes that match the same requests, as written
// or once folded, are named with the earlier one.
func TestValidateRoutesNamesDuplicatesAndOverlaps(t *testing.T) {
	routes := []proxy.Route{
		{OperationID: "a", Path: "/orders"},
		{OperationID: "a", Path: "/orders"},
		{OperationID: "b", Path: "/orders", Methods: []string{"GET"}},
		{OperationID: "c", Path: "/Orders", CaseInsensitive: true},
		{OperationID: "d", Path: "/orders/v2"},
	}
	var got []string
	for _, e := range proxy.ValidateRoutes(routes).(interface{ Unwrap() []error }).Unwrap() {
		fe := e.(*proxy.FieldError)
		got = append(got, fe.Field+" "+fe.Summary+" "+fe.Earlier)
	}
	want := []string{"routes[1].operation_id Duplicate route routes[0]", "routes[2] Routes overlap routes[0]",
		"routes[3] Routes overlap once folded routes[0]", "routes[3] Routes overlap once folded routes[2]"}
	if !slices.Equal(got, want) {
		t.Errorf("problems %q, want %q", got, want)
	}
}

// A pool's name is given once; the second is named with the first.
func TestValidatePoolsNamesADuplicate(t *testing.T) {
	a, _ := proxy.ParseTarget("http://10.0.0.11:9000")
	pools := []proxy.Pool{{Name: "a", Targets: []*url.URL{a}}, {Name: "b", Targets: []*url.URL{a}}, {Name: "a", Targets: []*url.URL{a}}}
	fields, earlier := problemFields(t, proxy.ValidatePools(pools))
	if !slices.Equal(fields, []string{"upstreams[2].name"}) || earlier != "upstreams[0]" {
		t.Errorf("fields %q (earlier %q), want the third's name, after the first", fields, earlier)
	}
	if _, err := proxy.NewHandler(proxy.Options{}, proxy.Config{Pools: pools, Limiter: limiter.NewMemory(limiter.MemoryOptions{}), Resolver: newResolver(t, nil)}); err == nil {
		t.Error("NewHandler took two pools of one name")
	}
}

// An upstream's rules are the proxy's too: two spellings of one target, a
// health check slower than its interval (the default one too) and a path
// that is not normalized are each named by field.
func TestPoolValidateNamesTheFieldOfEachProblem(t *testing.T) {
	a, _ := proxy.ParseTarget("http://10.0.0.11:9000")
	b, _ := proxy.ParseTarget("http://10.0.0.11:9000/")
	p := proxy.Pool{Name: "u", Targets: []*url.URL{a, b}, MaxEjectedPercent: 101,
		Health: &proxy.HealthCheck{Path: "/a/../healthz", Timeout: proxy.DefaultHealthInterval + time.Second}}
	fields, earlier := problemFields(t, p.Validate())
	want := []string{"targets[1]", "max_ejected_percent", "health.path", "health.timeout"}
	if !slices.Equal(fields, want) || earlier != "targets[0]" {
		t.Errorf("fields %q (earlier %q), want %q", fields, earlier, want)
	}
	p = proxy.Pool{Name: "u", Targets: []*url.URL{a}, ConnectTimeout: -time.Second, FailTimeout: proxy.MinTimeout / 2,
		ResponseTimeout: proxy.MinTimeout, Health: &proxy.HealthCheck{Path: "/healthz", Interval: -1, Timeout: time.Hour}}
	fields, _ = problemFields(t, p.Validate())
	if want := []string{"connect_timeout", "fail_timeout", "health.interval"}; !slices.Equal(fields, want) {
		t.Errorf("durations below the minimum: fields %q, want %q", fields, want)
	}
	if _, err := proxy.ParseTarget("ftp://10.0.0.11"); err == nil {
		t.Error("an ftp:// target was parsed")
	}
}

// The request path's own durations and bounds are held to their
// minimums by Config.Validate, which NewHandler asks: zero takes the
// default, anything else below the minimum is refused.
func TestConfigValidateHoldsTheSettingsToTheirMinimums(t *testing.T) {
	c := proxy.Config{Deadline: -1, FailureRetryAfter: proxy.MinFailureRetryAfter / 2,
		TunnelIdleTimeout: proxy.MinTimeout / 2, BodyReadTimeout: -time.Second, MaxDelayed: -1}
	fields, _ := problemFields(t, c.Validate())
	want := []string{"limiter.deadline", "limiter.failure_retry_after", "listen.tunnel_idle_timeout", "listen.body_read_timeout", "limiter.max_delayed"}
	if !slices.Equal(fields, want) {
		t.Errorf("fields %q, want %q", fields, want)
	}
	ok := proxy.Config{Deadline: proxy.MinTimeout, FailureRetryAfter: proxy.MinFailureRetryAfter, BodyReadTimeout: proxy.MinTimeout, MaxDelayed: 1}
	if err := ok.Validate(); err != nil {
		t.Errorf("the minimums, and the defaults: %v", err)
	}
	if _, err := proxy.NewHandler(proxy.Options{}, proxy.Config{Limiter: limiter.NewMemory(limiter.MemoryOptions{}), Resolver: newResolver(t, nil), Deadline: -1}); err == nil {
		t.Error("NewHandler took a negative deadline")
	}
}

// problemFields are the fields err's problems name, and the earlier field
// a clash names.
func problemFields(t *testing.T, err error) (fields []string, earlier string) {
	t.Helper()
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *proxy.FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%v is no FieldError", e)
		}
		fields = append(fields, fe.Field)
		if fe.Earlier != "" {
			earlier = fe.Earlier
		}
	}
	return fields, earlier
}
